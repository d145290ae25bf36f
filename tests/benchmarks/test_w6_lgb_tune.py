"""W6's tune phase over LightGBMTrainer: seconds per trial when trials reuse the first one's lgb.Datasets.

Run: python -m pytest tests/benchmarks/test_w6_lgb_tune.py --benchmarks -s
(W6_LGB_TAXI=taxi-s|taxi-m, W6_SAMPLES trials one at a time, W6_REPEATS fresh-process runs)

The case (cases/w6_lgb_airflowless.py): read_parquet -> W6's feature step and split -> MinMaxScaler ->
LightGBMTrainer (2 workers, 50 rounds) trained once -> a Tuner over learning_rate, num_leaves and
lambda_l2 (training parameters only: every trial may train on the Datasets binned before).
"""

from __future__ import annotations

import os

import pytest

from .common_cases import compare, median, spread
from .test_w6_e2e import _taxi

SIZES = {"taxi-s": (200_000, 4), "taxi-m": (2_000_000, 16)}


@pytest.mark.benchmark
def test_w6_lightgbm_tune_per_trial() -> None:
    name = os.environ.get("W6_LGB_TAXI", "taxi-m")
    path = _taxi(name, *SIZES[name])
    repeats = int(os.environ.get("W6_REPEATS", "3"))
    results = compare(["w6_lgb_airflowless"], repeats,
                      env={"TAXI_PATH": path, "AIRFLOWLESS_HOME": f"{os.path.dirname(path)}/home"})["w6_lgb_airflowless"]
    print(f"\nW6 LightGBM tune on {name}, median of {repeats} fresh-process runs (load {os.getloadavg()[0]:.1f})")
    for key in ("data_s", "once_s", "tune_s", "per_trial_s", "best_valid_logloss", "peak_rss_mb"):
        print(f"  {key:<20} {median(results, key):8.3f} ({spread(results, key)})")
    assert median(results, "best_valid_logloss") < 0.7, "the trials learned nothing"
