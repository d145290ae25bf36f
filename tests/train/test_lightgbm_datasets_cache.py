"""LightGBM's Datasets kept on the workers between fits (train.lightgbm, train.prepared), real 2-worker cluster.

A fit on the same prepared data whose binning parameters match trains on the Datasets the first one
binned, with the results of a fit without them; another binning, preprocessor or dataset builds its
own; a rank that lost its Datasets makes every rank build again; they go when the experiment ends.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from airflowless import data, tune
from airflowless.cli.main import cli
from airflowless.control import reads
from airflowless.data.preprocessors import MinMaxScaler, StandardScaler
from airflowless.datasets import LABEL_COLUMN
from airflowless.store import open_store
from airflowless.train import ScalingConfig, prepared
from airflowless.train.lightgbm import LightGBMTrainer, binning_params
from airflowless.tune import RunConfig
from tests.support.malloc import mean_held

pytestmark = [pytest.mark.usefixtures("cluster_client", "home"), pytest.mark.timeout(240)]

PARAMS = {"objective": "binary", "metric": ["binary_logloss"], "num_leaves": 15, "learning_rate": 0.1}


@pytest.fixture(autouse=True)
def fresh_cache(cluster_client: Any) -> Any:
    prepared.prepared_cache().clear(cluster_client)  # other tests' fits leave entries and Datasets
    yield prepared.prepared_cache()
    prepared.prepared_cache().clear(cluster_client)


def _datasets(taxi: pd.DataFrame, rows: int = 4_000) -> dict[str, data.Dataset]:
    return {"train": data.from_pandas([taxi[: rows // 2], taxi[rows // 2: rows]]),
            "valid": data.from_pandas(taxi[rows:])}


def _trainer(datasets: dict[str, data.Dataset], preprocessor: Any = None, **params: Any) -> LightGBMTrainer:
    return LightGBMTrainer(label_column=LABEL_COLUMN, params={**PARAMS, **params}, num_boost_round=5,
                           scaling_config=ScalingConfig(num_workers=2), datasets=datasets,
                           preprocessor=preprocessor or MinMaxScaler(columns=["trip_distance", "trip_duration"]))


def _built(trainer: LightGBMTrainer) -> bool:
    """Whether the fit's rank 0 built its Datasets (it times that as "data")."""
    return "rank0_data" in trainer.last_fit_seconds


def _cold(trainer: LightGBMTrainer, cache: prepared.PreparedCache) -> Any:
    """The fit of ``trainer``'s arguments with nothing kept from earlier fits."""
    cache.clear()
    pre = trainer.preprocessor
    fresh = LightGBMTrainer(label_column=trainer.label_column, params=trainer.params,
                            num_boost_round=trainer.num_boost_round, scaling_config=trainer.scaling_config,
                            datasets=trainer.datasets, preprocessor=type(pre)(columns=list(pre.columns)))
    result = fresh.fit()
    assert _built(fresh)
    return result


def _same(result: Any, cold: Any) -> None:
    """The same trees (splits on the same bin bounds) and the same metrics every round."""
    trees = [LightGBMTrainer.get_model(r.checkpoint).dump_model()["tree_info"] for r in (result, cold)]
    assert trees[0] == trees[1]
    assert result.metrics_history == cold.metrics_history


def _worker_hits() -> int:
    return sum(s.get("hits", 0) for s in prepared.stats()["workers"].values())


def test_binning_params_are_read_through_their_aliases_and_leave_out_what_a_trial_tunes() -> None:
    found = binning_params({"max_bins": 63, "min_child_samples": 5, "random_state": 7, "learning_rate": 0.3,
                            "num_leaves": 7, "lambda_l2": 1.0, "machines": "a:1,b:2"})
    assert found == {"max_bin": "63", "min_data_in_leaf": "5", "seed": "7"}


def test_a_fit_whose_binning_matches_trains_on_the_kept_datasets_with_the_results_of_a_fresh_build(
        taxi: pd.DataFrame, fresh_cache: prepared.PreparedCache) -> None:
    datasets = _datasets(taxi)
    first = _trainer(datasets)
    first.fit()
    assert _built(first)
    hits = _worker_hits()
    second = _trainer(datasets, learning_rate=0.3, num_leaves=7, lambda_l2=1.0)  # a trial's parameters differ
    result = second.fit()
    assert not _built(second), "the ranks kept their Datasets"
    assert _worker_hits() == hits + 2  # one per rank
    _same(result, _cold(second, fresh_cache))


def test_another_binning_preprocessor_or_dataset_builds_its_own(
        taxi: pd.DataFrame, fresh_cache: prepared.PreparedCache) -> None:
    """With the first fit's Datasets still kept (a build is as good as a fresh one: the test above)."""
    datasets = _datasets(taxi)
    _trainer(datasets).fit()
    cases = {"max_bin": _trainer(datasets, max_bin=15),
             # fewer rows per leaf than the kept Datasets were pre-filtered for: LightGBM refuses those
             "min_data_in_leaf": _trainer(datasets, min_data_in_leaf=3),
             "preprocessor": _trainer(datasets, StandardScaler(columns=["trip_distance", "fare_amount"])),
             "dataset": _trainer(_datasets(taxi, rows=3_000))}
    for what, trainer in cases.items():
        trainer.fit()
        assert _built(trainer), f"another {what}: the ranks trained on another fit's Datasets"


def test_a_rank_that_lost_its_datasets_makes_every_rank_build_again(
        taxi: pd.DataFrame, cluster_client: Any, fresh_cache: prepared.PreparedCache) -> None:
    """LightGBM bins the ranks' Datasets together: one rank without them (its worker restarted, or
    evicted them) must not train with the others' old ones. Each worker loses them in turn; rank 0
    sits on one of the two, so one of the rounds has rank 0 holding its Datasets and building anyway."""
    trainer = _trainer(_datasets(taxi))
    first = trainer.fit()
    for worker in sorted(cluster_client.scheduler_info()["workers"]):
        cluster_client.run(_forget_datasets, workers=[worker])
        result = trainer.fit()
        assert _built(trainer), f"{worker} lost its Datasets, yet rank 0 trained on kept ones"
        _same(result, first)


def _forget_datasets(dask_worker: Any = None) -> None:
    matrices = prepared.worker_matrices(dask_worker)
    assert matrices is not None
    matrices.close()


def test_trials_of_an_experiment_share_datasets_and_they_go_when_it_ends_in_its_record(
        taxi: pd.DataFrame, fresh_cache: prepared.PreparedCache, cluster_client: Any) -> None:
    hits = _worker_hits()
    grid = tune.Tuner(_trainer(_datasets(taxi)), run_config=RunConfig(name="lgb-shared"),
                      param_space={"params": {"learning_rate": tune.grid_search([0.1, 0.2, 0.3])}},
                      tune_config=tune.TuneConfig(metric="valid-binary_logloss", mode="min",
                                                  max_concurrent_trials=1)).fit()
    assert all(r.error is None for r in grid)
    assert _worker_hits() - hits == 4, "the second and third trials' two ranks each reused"
    workers = prepared.stats()["workers"]
    assert all(s["items"] == 0 for s in workers.values()), workers
    store = open_store()  # the record says so: through the control API's reads and the CLI
    used = reads.experiment(store, store.find_experiment("lgb-shared")["id"])["summary"]["prepared_data"]
    assert (used["misses"], used["hits"], used["workers"]["hits"], used["workers"]["misses"]) == (1, 2, 4, 2), used
    assert used["bytes"] > 0 and used["workers"]["bytes"] > 0, "what the experiment held when it ended"
    shown = CliRunner().invoke(cli, ["experiments", "show", "lgb-shared"])
    assert "prepared data: 2 hit(s), 1 miss(es), 0 evicted" in shown.output, shown.output
    assert "the workers' matrices: 4 hit(s), 2 miss(es)" in shown.output, shown.output


def test_without_lightgbms_alias_table_every_parameter_keys_the_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A LightGBM whose private alias table moved: kept Datasets serve only fits with the same parameters
    (a wrong reuse would train on another binning), the network the trainer sets per fit aside."""
    import lightgbm.basic

    params = {"max_bins": 63, "learning_rate": 0.3, "machines": "a:1,b:2", "local_listen_port": 1, "num_threads": 1}
    assert binning_params(params) == {"max_bin": "63"}
    monkeypatch.delattr(lightgbm.basic, "_ConfigAliases")
    assert binning_params(params) == {"max_bins": "63", "learning_rate": "0.3"}


@pytest.mark.parametrize("max_bin", [63, 1023])
def test_a_binned_dataset_is_counted_at_what_it_holds_not_at_its_frame(max_bin: int) -> None:
    """dataset_bytes against malloc's own count of what constructed Datasets hold (the mean of three, so
    that what construction frees and malloc keeps is not counted), on float64 features, as most frames
    are: a frame's size is several times that. 1,023 bins take two bytes a value."""
    import lightgbm as lgb
    import numpy as np

    from airflowless.train.gbdt import frame_bytes
    from airflowless.train.lightgbm import dataset_bytes

    rng = np.random.default_rng(3)
    rows = 100_000
    x = pd.DataFrame({"wide": rng.normal(size=rows), "few": rng.integers(0, 5, rows).astype("float64"),
                      "constant": np.ones(rows), "mostly_zero": np.where(rng.random(rows) < 0.1, 1.5, 0.0),
                      "ids": rng.integers(0, 100_000, rows).astype("float64")})
    y = pd.Series(x["wide"] > 0, dtype="int64")

    def binned() -> Any:
        return lgb.Dataset(x, label=y, params={"verbose": -1, "max_bin": max_bin, "num_threads": 1}).construct()

    held, kept = mean_held(binned)
    counted = dataset_bytes(kept[0])
    assert 0.8 * held <= counted <= 1.25 * held, (counted, held)
    assert frame_bytes(x) > 2.5 * counted, "a frame of float64 takes far more than its bins"
    assert kept[0].get_params()["max_bin"] == max_bin


def test_the_workers_count_their_datasets_at_what_the_binned_datasets_hold(
        taxi: pd.DataFrame, cluster_client: Any, fresh_cache: prepared.PreparedCache) -> None:
    """The frames they were built from count until the first round, the bins after it."""
    _trainer(_datasets(taxi)).fit()
    found = cluster_client.run(_kept_bytes)
    assert all(binned > 0 for _, binned in found.values()), found
    for address, (counted, binned) in found.items():
        assert counted == binned, (address, counted, binned)


def _kept_bytes(dask_worker: Any = None) -> tuple[int, int]:
    """(what the worker counts its kept Datasets at, what they hold binned)."""
    from airflowless.train.lightgbm import dataset_bytes

    matrices = prepared.worker_matrices(dask_worker)
    assert matrices is not None
    items = list(matrices._items.values())
    binned = 0
    for (train_set, valid_sets, _, state), _, _ in items:
        assert state["binned"]
        binned += sum(dataset_bytes(d) for d in {id(d): d for d in [train_set, *valid_sets]}.values())
    return matrices.stats()["bytes"], binned


KILL_BETWEEN_FITS = """
import os, sys
sys.path.insert(0, sys.argv[1])
import airflowless
from airflowless import data
from airflowless.data.preprocessors import MinMaxScaler
from airflowless.datasets import LABEL_COLUMN
from airflowless.train import ScalingConfig, prepared
from airflowless.train.lightgbm import LightGBMTrainer
from tests.support.workers import kill_worker
from tests.train.conftest import gbdt_frame

client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
frame = gbdt_frame(6_000, seed=1)
datasets = {"train": data.from_pandas([frame[:2_000], frame[2_000:4_000]]), "valid": data.from_pandas(frame[4_000:])}

def trainer():
    return LightGBMTrainer(label_column=LABEL_COLUMN, num_boost_round=5, scaling_config=ScalingConfig(num_workers=2),
                           params={"objective": "binary", "metric": ["binary_logloss"], "num_leaves": 15},
                           datasets=datasets, preprocessor=MinMaxScaler(columns=["trip_distance", "trip_duration"]))

def fit(t):
    result = t.fit()
    trees = LightGBMTrainer.get_model(result.checkpoint).dump_model()["tree_info"]
    return trees, result.metrics_history, "rank0_data" in t.last_fit_seconds

t = trainer()
assert fit(t)[2], "the first fit builds"
assert not fit(t)[2], "the second trains on the kept Datasets"
# every block on both workers: the prepared data outlives the kill, so the rank on the other worker still
# holds Datasets that match the next fit's key, and only the agreement of the ranks makes it build again
client.replicate([b for entry in prepared.prepared_cache()._entries.values()
                  for plan in entry.plans.values() for b in plan.blocks], n=2)
ranks = client.run(lambda dask_worker: [key[2] for key in prepared.worker_matrices(dask_worker)._items])
assert sorted(ranks.values()) == [[0], [1]], ranks
before = client.run(os.getpid)
# rank 1's worker: rank 0's stays rank 0 (placement prefers the workers of the last fit) with its Datasets
kill_worker(client, next(before[address] for address, held in ranks.items() if held == [1]))
hits = {a: s.get("hits", 0) for a, s in prepared.stats()["workers"].items()}
trees, history, built = fit(t)
assert built, "rank 0 built its Datasets again"
after = prepared.stats()
assert after["rebuilds"] == 0, ("the prepared data was lost, so the kill tested nothing of the ranks' agreement", after)
found = {a: s.get("hits", 0) - hits.get(a, 0) for a, s in after["workers"].items()}
assert sorted(found.values()) == [0, 1], ("rank 0 found its Datasets, rank 1 had none", found)
prepared.prepared_cache().clear(client)
cold = fit(trainer())
assert cold[2]
assert trees == cold[0], "the trees of a cold build"
assert history == cold[1], "the metrics of a cold build"
print("REBUILT")
airflowless.shutdown()
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_worker_makes_every_rank_build_again_with_the_results_of_a_cold_build(
        tmp_path: Any, home: Any) -> None:
    """A worker process killed for real (SIGKILL; its nanny starts another) between two fits: its rank
    lost its Datasets, the other rank kept its own. On a cluster of its own (a driver subprocess): the
    shared cluster loses no worker."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", KILL_BETWEEN_FITS, root], cwd=tmp_path, capture_output=True,
                          text=True, timeout=280, env={**os.environ, "AIRFLOWLESS_HOME": str(home)})
    assert done.returncode == 0 and "REBUILT" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]
