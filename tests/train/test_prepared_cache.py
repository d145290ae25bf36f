"""Prepared data shared across fits (airflowless.train.prepared) on the real 2-worker cluster.

Reuse gives the results of a fit without it; another preprocessor or dataset never reuses what was
prepared for the first; entries go oldest first over the budget and with the experiment that used them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from airflowless import data, tune
from airflowless.data.preprocessors import MinMaxScaler, StandardScaler
from airflowless.datasets import LABEL_COLUMN
from airflowless.train import ScalingConfig, prepared
from airflowless.train.xgboost import XGBoostTrainer

pytestmark = [pytest.mark.usefixtures("cluster_client", "home"), pytest.mark.timeout(240)]

PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss"], "tree_method": "hist", "max_depth": 4}


@pytest.fixture(autouse=True)
def fresh_cache() -> Any:
    prepared.prepared_cache().clear()  # other tests' fits leave entries (blocks already on the cluster)
    counts = prepared.prepared_cache().counts
    counts.update(dict.fromkeys(counts, 0))
    yield prepared.prepared_cache()
    prepared.prepared_cache().clear()


def _trainer(datasets: dict[str, data.Dataset], preprocessor: Any = None, **params: Any) -> XGBoostTrainer:
    return XGBoostTrainer(label_column=LABEL_COLUMN, params={**PARAMS, **params}, num_boost_round=5,
                          scaling_config=ScalingConfig(num_workers=2), datasets=datasets,
                          preprocessor=preprocessor or MinMaxScaler(columns=["trip_distance", "trip_duration"]))


def _datasets(taxi: pd.DataFrame, rows: int = 4_000) -> dict[str, data.Dataset]:
    return {"train": data.from_pandas([taxi[: rows // 2], taxi[rows // 2: rows]]),
            "valid": data.from_pandas(taxi[rows:])}


def test_a_second_fit_on_the_same_data_reuses_what_the_first_prepared_with_the_same_results(
        taxi: pd.DataFrame, fresh_cache: prepared.PreparedCache) -> None:
    trainer = _trainer(_datasets(taxi))
    first = trainer.fit()
    assert trainer.last_fit_seconds["prepared_hit"] == 0 and "rank0_data" in trainer.last_fit_seconds
    again = _trainer(trainer.datasets).fit()
    second = trainer.fit()  # the same trainer (its preprocessor fitted now) and a new one both reuse
    assert trainer.last_fit_seconds["prepared_hit"] == 1
    assert "rank0_data" not in trainer.last_fit_seconds, "the ranks kept their matrices"
    assert fresh_cache.stats()["hits"] == 2 and fresh_cache.stats()["entries"] == 1
    workers = prepared.stats()["workers"]
    assert all(s["hits"] >= 2 and s["items"] == 1 for s in workers.values()), workers
    fresh_cache.clear()  # without the cache: prepared again, the same numbers
    cold = _trainer(trainer.datasets).fit()
    assert first.metrics["valid-logloss"] == again.metrics["valid-logloss"] == second.metrics["valid-logloss"] \
        == cold.metrics["valid-logloss"]
    assert first.metrics_history == second.metrics_history


def test_another_preprocessor_or_dataset_never_reuses_a_stale_shard(
        taxi: pd.DataFrame, fresh_cache: prepared.PreparedCache) -> None:
    datasets = _datasets(taxi)
    _trainer(datasets).fit()
    cases = {"other preprocessor": _trainer(datasets, StandardScaler(columns=["trip_distance", "fare_amount"])),
             "other columns": _trainer(datasets, MinMaxScaler(columns=["fare_amount"])),
             "other dataset": _trainer(_datasets(taxi, rows=3_000)),
             "other binning": _trainer(datasets, max_bin=16)}
    for what, trainer in cases.items():
        result = trainer.fit()
        assert "rank0_data" in trainer.last_fit_seconds, f"{what}: the ranks reused matrices of another fit"
        fresh_cache.clear()
        cold = XGBoostTrainer(**{**_args(trainer)}).fit()
        assert result.metrics["valid-logloss"] == cold.metrics["valid-logloss"], what
        if what != "other binning":
            assert trainer.last_fit_seconds["prepared_hit"] == 0, f"{what}: reused another fit's prepared data"


def _args(trainer: XGBoostTrainer) -> dict[str, Any]:
    pre = trainer.preprocessor
    fresh = type(pre)(columns=list(pre.columns))
    return {"label_column": trainer.label_column, "params": trainer.params, "num_boost_round": trainer.num_boost_round,
            "scaling_config": trainer.scaling_config, "datasets": trainer.datasets, "preprocessor": fresh}


def test_entries_over_the_budget_go_oldest_first_with_their_matrices(
        taxi: pd.DataFrame, fresh_cache: prepared.PreparedCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fresh_cache, "budget_bytes", 1)  # room for the newest entry only
    first = _datasets(taxi)
    _trainer(first).fit()
    _trainer(_datasets(taxi, rows=3_000)).fit()
    found = prepared.stats()
    assert found["entries"] == 1 and found["evictions"] == 1
    assert all(s["items"] == 1 for s in found["workers"].values()), found["workers"]
    trainer = _trainer(first)
    trainer.fit()
    assert trainer.last_fit_seconds["prepared_hit"] == 0 and "rank0_data" in trainer.last_fit_seconds


def test_trials_of_an_experiment_share_prepared_data_and_it_goes_when_the_experiment_ends(
        taxi: pd.DataFrame, tmp_path: Any, fresh_cache: prepared.PreparedCache) -> None:
    # files: a fit alone would not keep them (a file may change), trials of one experiment do
    taxi[:4_000].to_parquet(tmp_path / "train.parquet")
    taxi[4_000:].to_parquet(tmp_path / "valid.parquet")
    datasets = {"train": data.read_parquet(str(tmp_path / "train.parquet")),
                "valid": data.read_parquet(str(tmp_path / "valid.parquet"))}
    trainer = _trainer(datasets)
    trainer.fit()
    before = fresh_cache.stats()
    assert before["entries"] == 0
    grid = tune.Tuner(trainer, param_space={"params": {"eta": tune.grid_search([0.1, 0.3, 0.5])}},
                      tune_config=tune.TuneConfig(metric="valid-logloss", mode="min",
                                                  max_concurrent_trials=1)).fit()
    assert all(r.error is None for r in grid)
    found = fresh_cache.stats()
    assert found["misses"] - before["misses"] == 1 and found["hits"] - before["hits"] == 2, found
    assert found["entries"] == 0, found


KILL_BETWEEN_FITS = """
import os, sys
sys.path.insert(0, sys.argv[1])
import pandas as pd
import airflowless
from airflowless import data
from airflowless.data.preprocessors import MinMaxScaler
from airflowless.datasets import LABEL_COLUMN, add_features, taxi_table
from airflowless.train import ScalingConfig, prepared
from airflowless.train.recorder import StoreRecorder
from airflowless.train.xgboost import XGBoostTrainer
from tests.support.workers import kill_worker

client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
frame = add_features(taxi_table(6_000, seed=1)).to_pandas().drop(columns=["pickup_ts", "dropoff_ts", "tip_amount"])
frame[LABEL_COLUMN] = frame[LABEL_COLUMN].astype("int64")
for i in range(4):
    frame[i * 1_000:(i + 1) * 1_000].to_parquet(f"train-{i}.parquet")
frame[4_000:].to_parquet("valid.parquet")
trainer = XGBoostTrainer(label_column=LABEL_COLUMN, num_boost_round=5, scaling_config=ScalingConfig(num_workers=2),
                         params={"objective": "binary:logistic", "eval_metric": ["logloss"], "max_depth": 4},
                         datasets={"train": data.read_parquet([f"train-{i}.parquet" for i in range(4)]),
                                   "valid": data.read_parquet("valid.parquet")},
                         preprocessor=MinMaxScaler(columns=["trip_distance", "trip_duration"]))
first = trainer.fit_with_recorder(StoreRecorder(), scope="experiment")  # as a Tune trial's trainer
assert trainer.last_fit_seconds["prepared_hit"] == 0
kill_worker(client, sorted(client.run(os.getpid).values())[0])
second = trainer.fit_with_recorder(StoreRecorder(), scope="experiment")
assert "rank0_data" in trainer.last_fit_seconds, "the ranks built their matrices again"
assert second.metrics["valid-logloss"] == first.metrics["valid-logloss"], (first.metrics, second.metrics)
print("REBUILT", prepared.stats())
prepared.release_scope("experiment")
airflowless.shutdown()
"""


def test_a_killed_worker_is_rebuilt_never_silently_wrong(tmp_path: Any, home: Any) -> None:
    """On a cluster of its own (a driver subprocess): the shared cluster loses no worker."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", KILL_BETWEEN_FITS, root], cwd=tmp_path, capture_output=True,
                          text=True, timeout=220, env={**os.environ, "AIRFLOWLESS_HOME": str(home)})
    assert done.returncode == 0 and "REBUILT" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]


@pytest.mark.parametrize(("features", "max_bin", "missing"), [(20, None, 0.0), (7, 1024, 0.0), (20, None, 0.3)])
def test_a_rank_s_matrices_are_counted_at_what_they_hold_not_at_their_frame(
        features: int, max_bin: int | None, missing: float) -> None:
    """matrix_bytes against malloc's own count of what XGBoost's matrices hold (the mean of three), on
    float64 features: a QuantileDMatrix holds a few bytes a value where the frame has eight; a DMatrix
    holds eight whatever the dtypes (int8 columns, as the taxi rows have, are counted at eight too)."""
    import numpy as np
    import xgboost as xgb

    from airflowless.train.gbdt import frame_bytes
    from airflowless.train.xgboost import matrix_bytes
    from tests.support.malloc import mean_held

    rng = np.random.default_rng(5)
    rows = 50_000
    x = pd.DataFrame(rng.normal(size=(rows, features)), columns=[f"f{i}" for i in range(features)])
    x = x.mask(rng.random(x.shape) < missing) if missing else x
    x["small"] = rng.integers(0, 100, rows).astype("int8")
    y = pd.Series(rng.integers(0, 2, rows))
    held, kept = mean_held(lambda: xgb.QuantileDMatrix(x, label=y, max_bin=max_bin, nthread=1))
    counted = matrix_bytes(kept[0], max_bin)
    assert 0.8 * held <= counted <= 1.2 * held, ("QuantileDMatrix", counted, held)
    if features == 20 and not missing:
        assert frame_bytes(x) > 2.5 * held, "a frame of float64 takes far more than the bins"
    held, kept = mean_held(lambda: xgb.DMatrix(x, label=y, nthread=1))
    counted = matrix_bytes(kept[0])
    assert 0.9 * held <= counted <= 1.1 * held, ("DMatrix", counted, held)
