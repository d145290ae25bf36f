"""W4: Tune overhead (200 no-work trials x 10 reports) and ASHA search quality on the synthetic curve.

Run: python -m pytest tests/benchmarks/test_w4_tune.py --benchmarks -s
(a) trials/s for airflowless (trials as Dask tasks on worker processes) and Optuna in one process (the floor).
(b) ASHA, 64 trials, max_t=100, grace 1, reduction 3: best loss, iterations spent, wall seconds, for each
    seed of W4B_SEEDS (default 7,8,9). Every system searches the same 64 points drawn from the W4 space with
    that seed: airflowless ASHA with Ray's stopping rule and with the promotion rule, FIFO with the promotion
    rule's iteration budget, Optuna successive halving in one process, and Ray Tune's ASHA when an
    interpreter with Ray is found ($RAY_PYTHON, or this one).
"""

from __future__ import annotations

import math
import os

import pytest

from .common_cases import compare, median, ray_python, run_case


@pytest.mark.benchmark
def test_w4a_overhead() -> None:
    repeats = int(os.environ.get("W4_REPEATS", "3"))
    results = compare(["w4a_airflowless", "w4a_optuna"], repeats, env={"AIRFLOWLESS_HOME": "/tmp/airflowless-bench/home"})
    ours = 200 / median(results["w4a_airflowless"], "seconds")
    floor = 200 / median(results["w4a_optuna"], "seconds")
    print(f"\nW4a 200 trials x 10 reports: airflowless {ours:.1f} trials/s, Optuna one process {floor:.0f} trials/s "
          f"(Ray Tune 0.79 here: x{ours / 0.79:.0f}); per trial {1000 / ours:.1f} ms")


@pytest.mark.benchmark
def test_w4b_asha_quality() -> None:
    env = {"AIRFLOWLESS_HOME": "/tmp/airflowless-bench/home"}
    ray = ray_python()
    rows: dict[str, list[dict[str, float]]] = {}
    for seed in os.environ.get("W4B_SEEDS", "7,8,9").split(","):
        seeded = {**env, "W4_SEED": seed}
        runs = {"ASHA stopping rule": run_case("w4b_airflowless", env={**seeded, "W4_SCHEDULER": "asha"}),
                "ASHA promotion rule": run_case("w4b_airflowless",
                                                env={**seeded, "W4_SCHEDULER": "asha-promotion"})}
        budget = max(1, math.ceil(runs["ASHA promotion rule"]["iterations"] / 100))
        runs["FIFO, same budget"] = run_case("w4b_airflowless", env={
            **seeded, "W4_SCHEDULER": "fifo", "W4_SAMPLES": str(budget)})
        runs["Optuna SHA, one process"] = run_case("w4b_optuna", env=seeded)
        if ray is not None:
            runs["Ray Tune ASHA"] = run_case("w4b_ray", env=seeded, python=ray)
        print(f"\nW4b synthetic curve, 64 trials, points drawn with seed {seed}")
        for name, r in runs.items():
            rows.setdefault(name, []).append(r)
            print(f"  {name:<26} best loss {r['best_loss']:8.4f}  iterations {int(r['iterations']):5d}  "
                  f"{r['seconds']:7.2f} s  {r['peak_rss_mb']:6.0f} MB")
    print("\nW4b medians over seeds (anchor: Ray Tune 86-95 s, 327-362 iterations, best 0.0011)")
    for name, results in rows.items():
        print(f"  {name:<26} best loss {median(results, 'best_loss'):8.4f}  "
              f"iterations {median(results, 'iterations'):7.1f}  {median(results, 'seconds'):7.2f} s")
    if "Ray Tune ASHA" in rows:
        ours, theirs = rows["ASHA promotion rule"], rows["Ray Tune ASHA"]
        print(f"  promotion rule vs Ray: iterations x{median(ours, 'iterations') / median(theirs, 'iterations'):.2f}, "
              f"seconds x{median(ours, 'seconds') / median(theirs, 'seconds'):.3f}")
