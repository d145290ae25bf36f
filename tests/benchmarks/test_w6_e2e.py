"""W6: the seed walkthrough end to end on taxi-M, airflowless against hand-written Dask glue.

Run: python -m pytest tests/benchmarks/test_w6_e2e.py --benchmarks -s
(W6_REPEATS=3 interleaved fresh-process runs; W6_LAYOUT=2x1 ranks per trial x trials in flight, or 1x2).
It also times the tune's floor: the same 8 fits in 2 plain XGBoost processes (cases/w6_floor.py).

airflowless: read_parquet -> feature step -> split -> MinMaxScaler -> XGBoostTrainer (2 workers, 50 rounds)
trained once -> Tuner (eta, max_depth, min_child_weight; 8 samples, Optuna TPE seed 0) -> BatchPredictor on
the valid split -> PredictorDeployment answering one POST. The peer (cases/w6_dask.py): dask.dataframe +
xgboost.dask + Optuna + a uvicorn/Starlette process. Phases are timed after the cluster is up; memory is
the peak RSS of all processes.
"""

from __future__ import annotations

import os

import pytest

from .common_cases import compare, median, run_case, spread

DATA = os.environ.get("AIRFLOWLESS_BENCH_DATA", "/tmp/airflowless-bench")
PHASES = ["data_s", "once_s", "tune_s", "batch_s", "serve_s"]


def _taxi(name: str, rows: int, files: int) -> str:
    from airflowless.datasets import make_taxi

    path = f"{DATA}/{name}"
    make_taxi(rows, n_files=files, path=path, seed=0)
    return path


@pytest.mark.benchmark
def test_w6_e2e_taxi_m() -> None:
    path = _taxi("taxi-m", 2_000_000, 16)
    repeats = int(os.environ.get("W6_REPEATS", "3"))
    layout = os.environ.get("W6_LAYOUT", "2x1")
    cases = ["w6_airflowless", "w6_dask"]
    results = compare([*cases, "w6_floor"], repeats, env={"TAXI_PATH": path, "AIRFLOWLESS_HOME": f"{DATA}/home",
                                                          "W6_LAYOUT": layout})
    print(f"\nW6 e2e taxi-M, layout {layout} (airflowless), median of {repeats} interleaved fresh-process runs, "
          f"load {os.getloadavg()[0]:.1f}")
    for c in cases:
        rs = results[c]
        phases = ", ".join(f"{p[:-2]} {median(rs, p):.1f}" for p in PHASES)
        print(f"  {c:<16} {median(rs, 'seconds'):6.1f} s ({spread(rs, 'seconds')}) [{phases}]  "
              f"peak {median(rs, 'peak_rss_mb'):5.0f} MB  best valid logloss {median(rs, 'best_valid_logloss'):.4f}"
              f"  accuracy {median(rs, 'accuracy'):.4f}")
    fit = {k[4:]: median(results["w6_airflowless"], k) for k in results["w6_airflowless"][0] if k.startswith("fit_")}
    print("  airflowless train-once fit phases: " + ", ".join(f"{k} {v:.2f}" for k, v in fit.items()))
    ratio = median(results["w6_airflowless"], "seconds") / median(results["w6_dask"], "seconds")
    memory = median(results["w6_airflowless"], "peak_rss_mb") / median(results["w6_dask"], "peak_rss_mb")
    print(f"  airflowless / Dask glue: time {ratio:.2f} (target <= 0.7), peak memory {memory:.2f} (target <= 1)")
    ours, floor = median(results["w6_airflowless"], "tune_s"), median(results["w6_floor"], "tune_s")
    bound = (median(results["w6_airflowless"], "seconds") - ours + floor) / median(results["w6_dask"], "seconds")
    print(f"  tune floor (cases/w6_floor.py: 2 plain XGBoost processes, matrices built once) {floor:.1f} s "
          f"({spread(results['w6_floor'], 'tune_s')}), best valid logloss "
          f"{median(results['w6_floor'], 'best_valid_logloss'):.4f}; airflowless tune / floor {ours / floor:.2f}; "
          f"airflowless / Dask glue with a tune at the floor {bound:.2f}")
    gap = abs(median(results["w6_airflowless"], "best_valid_logloss") - median(results["w6_dask"], "best_valid_logloss"))
    assert gap <= 0.002, f"best valid logloss differs by {gap:.4f} (must be within 0.002)"


@pytest.mark.benchmark
def test_w6_fit_fixed_cost_taxi_s() -> None:
    """Part 3: one trainer fit on prepared taxi-S against xgboost.dask's own train, on the same workers."""
    path = _taxi("taxi-s", 200_000, 4)
    figures = run_case("w6_fixed_cost", env={"TAXI_PATH": path, "AIRFLOWLESS_HOME": f"{DATA}/home"})
    print(f"\nW6 one fit on prepared taxi-S (median of {os.environ.get('W6_FIT_REPEATS', '3')} alternating), "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"  XGBoostTrainer.fit {figures['fit_s']:.2f} s  xgboost.dask.train {figures['dask_train_s']:.2f} s  "
          f"ratio {figures['fit_s'] / figures['dask_train_s']:.2f} (target <= 1.3)")
    print("  fit phases: " + ", ".join(f"{k[6:]} {v:.3f}" for k, v in figures.items() if k.startswith("phase_")))
    assert abs(figures["fit_valid_logloss"] - figures["dask_valid_logloss"]) < 0.01
