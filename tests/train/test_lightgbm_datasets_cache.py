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
