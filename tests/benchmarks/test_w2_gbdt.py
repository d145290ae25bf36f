"""W2: distributed XGBoost on taxi-M (2 workers, 50 rounds) from parquet on disk to a trained model.

Run: python -m pytest tests/benchmarks/test_w2_gbdt.py --benchmarks -s
Side by side in one run: airflowless XGBoostTrainer, xgboost.dask, single-process xgboost (nthread=2).
Cluster start is excluded; memory is the peak RSS of all processes.
"""

from __future__ import annotations

import os

import pytest

from .common_cases import compare, median, spread

DATA = os.environ.get("AIRFLOWLESS_BENCH_DATA", "/tmp/airflowless-bench")


@pytest.mark.benchmark
def test_w2_xgboost_taxi_m() -> None:
    from airflowless.datasets import make_taxi

    path = f"{DATA}/taxi-m"
    make_taxi(2_000_000, n_files=16, path=path, seed=0)
    repeats = int(os.environ.get("W2_REPEATS", "3"))
    cases = ["w2_xgb_airflowless", "w2_xgb_dask", "w2_xgb_single"]
    results = compare(cases, repeats, env={"TAXI_PATH": path, "AIRFLOWLESS_HOME": f"{DATA}/home"})
    print(f"\nW2 XGBoost taxi-M, 50 rounds, median of {repeats} fresh-process runs")
    for c in cases:
        print(f"  {c:<20} {median(results[c], 'seconds'):6.2f} s ({spread(results[c], 'seconds')})  "
              f"valid logloss {median(results[c], 'valid_logloss'):.4f}  peak {median(results[c], 'peak_rss_mb'):6.0f} MB")
    ratio = median(results["w2_xgb_airflowless"], "seconds") / median(results["w2_xgb_dask"], "seconds")
    print(f"  airflowless / xgboost.dask time = {ratio:.2f} (target <= 1.0)")
    base = median(results["w2_xgb_single"], "valid_logloss")
    for c in cases:
        assert abs(median(results[c], "valid_logloss") - base) < 0.01, f"{c} does not reach the same quality"


@pytest.mark.benchmark
def test_w2_lightgbm_taxi_m() -> None:
    from airflowless.datasets import make_taxi

    path = f"{DATA}/taxi-m"
    make_taxi(2_000_000, n_files=16, path=path, seed=0)
    repeats = int(os.environ.get("W2_REPEATS", "3"))
    cases = ["w2_lgb_airflowless", "w2_lgb_dask", "w2_lgb_single"]
    results = compare(cases, repeats, env={"TAXI_PATH": path, "AIRFLOWLESS_HOME": f"{DATA}/home"})
    print(f"\nW2 LightGBM taxi-M, 50 rounds, median of {repeats} fresh-process runs")
    for c in cases:
        print(f"  {c:<20} {median(results[c], 'seconds'):6.2f} s ({spread(results[c], 'seconds')})  "
              f"valid logloss {median(results[c], 'valid_logloss'):.4f}  peak {median(results[c], 'peak_rss_mb'):6.0f} MB")
    ratio = median(results["w2_lgb_airflowless"], "seconds") / median(results["w2_lgb_dask"], "seconds")
    print(f"  airflowless / lightgbm.dask time = {ratio:.2f} (target <= 1.0)")
