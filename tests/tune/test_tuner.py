"""Tuner on the real embedded cluster (2 worker processes): functions and Trainers as trials.

Each test runs one or two small experiments and checks the ResultGrid and the
record in the store together, to keep the cluster time short.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from airflowless import data, tune
from airflowless.datasets import FEATURE_COLUMNS, LABEL_COLUMN, add_features, taxi_table
from airflowless.store import open_store
from airflowless.train import Checkpoint, RunConfig, ScalingConfig
from airflowless.tune.search.optuna import OptunaSearch

pytestmark = pytest.mark.usefixtures("cluster_client", "home")

MAX_T = 20
ASHA_RUNGS = {1, 2, 4, 8, 16, MAX_T}  # grace_period 1, reduction_factor 2, and max_t


def quadratic(config: dict[str, Any]) -> None:
    """Loss falls with iterations; trials rank by x at every iteration (best: x closest to 3)."""
    for it in range(1, MAX_T + 1):
        tune.report({"loss": (config["x"] - 3) ** 2 + 1 / it})


def records_by_name(experiment_name: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    store = open_store()
    try:
        (experiment,) = [e for e in store.list_experiments() if e["name"] == experiment_name]
        return experiment, {t["name"]: t for t in store.list_trials(experiment["id"])}
    finally:
        store.close()


def trial_name(result: Any) -> str:
    return Path(result.path).name


def test_asha_stops_bad_trials_early_and_keeps_the_best(home: Path) -> None:
    asha = tune.ASHAScheduler(max_t=MAX_T, grace_period=1, reduction_factor=2)
    grid = tune.Tuner(quadratic, param_space={"x": tune.uniform(0, 6)},
                      tune_config=tune.TuneConfig(num_samples=16, metric="loss", mode="min", seed=0, scheduler=asha),
                      run_config=RunConfig(name="asha")).fit()
    assert len(grid) == 16 and grid.errors == [] and grid.num_terminated == 16
    lengths = sorted(len(r.metrics_history) for r in grid)
    # e.g. [1, 1, 1, 1, 1, 1, 2, 20, ...]: arrival order at the rungs varies with timing
    assert sum(lengths) < 16 * MAX_T * 0.8
    assert sum(n < MAX_T for n in lengths) >= 5 and lengths.count(1) >= 3
    assert set(lengths) <= ASHA_RUNGS  # a trial stops at the very report its rung judged
    assert lengths[0] == 1 and lengths[-1] == MAX_T
    for r in grid:
        assert [h["training_iteration"] for h in r.metrics_history] == list(range(1, len(r.metrics_history) + 1))
        assert r.metrics == r.metrics_history[-1]

    closest = min(grid, key=lambda r: abs(r.config["x"] - 3))
    best = grid.get_best_result()
    assert best.config == closest.config and best.metrics["training_iteration"] == MAX_T
    assert grid.get_best_result(scope="all").config == closest.config
    assert grid.get_best_result("loss", "max").config != closest.config

    # the record: the experiment, every trial, every report
    experiment, trials = records_by_name("asha")
    assert (experiment["kind"], experiment["status"], experiment["metric"], experiment["mode"]) == (
        "tune", "completed", "loss", "min")
    assert experiment["storage_path"] == grid.experiment_path == str(home / "storage" / "asha")
    assert sorted(trials) == sorted(trial_name(r) for r in grid)
    store = open_store()
    try:
        for r in grid:
            record = trials[trial_name(r)]
            assert (record["status"], record["restarts"]) == ("completed", 0)
            assert record["config"] == r.config and record["iterations"] == len(r.metrics_history)
            assert record["last_metrics"] == r.metrics
            rows = store.trial_metrics(record["id"])
            assert [row["step"] for row in rows] == [h["training_iteration"] for h in r.metrics_history]
            assert [row["loss"] for row in rows] == [h["loss"] for h in r.metrics_history]
    finally:
        store.close()

    frame = grid.get_dataframe()
    assert len(frame) == 16
    assert {"loss", "training_iteration", "config/x", "trial_path", "error"} <= set(frame.columns)
    assert frame["error"].isna().all()
    assert frame["config/x"].tolist() == [r.config["x"] for r in grid]
    shown = grid._repr_html_()
    assert shown.startswith("<p>ResultGrid&lt;16 trials, 16 completed, 0 errored") and "<table" in shown
    assert "config/x" in shown


def test_xgboost_trainer_tuned_as_in_the_seed_notebook() -> None:
    from airflowless.data.preprocessors import MinMaxScaler
    from airflowless.train.xgboost import XGBoostTrainer

    frame = add_features(taxi_table(4_000, seed=0)).to_pandas()[[*FEATURE_COLUMNS, LABEL_COLUMN]]
    train_dataset, valid_dataset = data.from_pandas(frame).train_test_split(test_size=0.3)
    trainer = XGBoostTrainer(
        label_column="is_big_tip",
        num_boost_round=10,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        datasets={"train": train_dataset, "valid": valid_dataset},
        preprocessor=MinMaxScaler(columns=["trip_distance", "trip_duration"]),
    )
    param_space = {"params": {"eta": tune.uniform(0.2, 0.4), "max_depth": tune.randint(1, 6),
                              "min_child_weight": tune.uniform(0.8, 1.0)}}
    tuner = tune.Tuner(trainer, param_space=param_space,
                       tune_config=tune.TuneConfig(num_samples=3, metric="train-logloss", mode="min"),
                       run_config=RunConfig(name="xgb"))
    result_grid = tuner.fit()

    assert len(result_grid) == 3 and result_grid.errors == []
    best_result = result_grid.get_best_result()
    assert best_result.metrics["train-logloss"] == min(r.metrics["train-logloss"] for r in result_grid)
    assert {"train-logloss", "train-error", "valid-logloss", "valid-error"} <= set(best_result.metrics)
    assert best_result.metrics["boosting_round"] == best_result.metrics["training_iteration"] == 10
    assert 1 - best_result.metrics["valid-error"] > 0.6  # learnt something (the label is not constant)
    params = best_result.config["params"]
    assert 0.2 <= params["eta"] <= 0.4 and params["max_depth"] in range(1, 6)
    assert 0.8 <= params["min_child_weight"] <= 1.0
    assert best_result.checkpoint is not None
    booster = XGBoostTrainer.get_model(best_result.checkpoint)
    assert booster.num_boosted_rounds() == 10
    assert trainer.params == {"objective": "binary:logistic", "eval_metric": ["logloss", "error"]}  # not changed

    experiment, trials = records_by_name("xgb")
    assert experiment["status"] == "completed" and len(trials) == 3
    assert all(t["status"] == "completed" and t["iterations"] == 10 for t in trials.values())
    assert trials[trial_name(best_result)]["checkpoint_uri"] == best_result.checkpoint.path
    store = open_store()
    try:
        assert [e["kind"] for e in store.list_experiments()] == ["tune"]  # trials write into the experiment
        assert store.trial_checkpoints(trials[trial_name(best_result)]["id"])[-1]["uri"] == best_result.checkpoint.path
    finally:
        store.close()


def fails_for_two(config: dict[str, Any]) -> None:
    tune.report({"loss": float(config["x"])})
    if config["x"] == 2:
        raise ValueError("x=2 is not allowed")
    tune.report({"loss": config["x"] / 2})


def overfits(config: dict[str, Any]) -> None:
    for it in range(1, 7):
        tune.report({"loss": abs(it - config["best_at"]) + config["floor"]})


def test_errors_are_collected_and_best_results_by_last_or_all_reports() -> None:
    grid = tune.Tuner(fails_for_two, param_space={"x": tune.grid_search([1, 2, 3])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", max_failures=1),
                      run_config=RunConfig(name="errors")).fit()
    assert len(grid) == 3 and grid.num_errors == 1 and grid.num_terminated == 2
    (error,) = grid.errors
    assert "ValueError: x=2 is not allowed" in str(error)
    failed = next(r for r in grid if r.error is not None)
    assert failed.config == {"x": 2} and failed.metrics["loss"] == 2.0
    assert [r.metrics["loss"] for r in grid if r.error is None] == [0.5, 1.5]
    assert grid.get_best_result().config == {"x": 1}
    assert "1 errored" in repr(grid)
    assert grid.get_dataframe()["error"].notna().sum() == 1
    experiment, trials = records_by_name("errors")
    assert experiment["status"] == "completed_with_errors"
    record = trials[trial_name(failed)]
    assert (record["status"], record["restarts"]) == ("errored", 1)  # retried once, failed again
    assert "x=2 is not allowed" in record["error"]

    space = {"best_at": tune.grid_search([2, 6]), "floor": tune.sample_from(lambda spec: spec.config.best_at / 6)}
    grid = tune.Tuner(overfits, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min")).fit()
    assert grid.get_best_result().config["best_at"] == 6  # last reports: 4.33 vs 1.0
    assert grid.get_best_result(scope="all").config["best_at"] == 2  # best reports: 0.33 vs 1.0
    with pytest.raises(ValueError, match="no trial reported 'acc'"):
        grid.get_best_result("acc", "max")
    with pytest.raises(ValueError, match="scope must be 'last' or 'all'"):
        grid.get_best_result(scope="best")


def resumable(config: dict[str, Any]) -> None:
    """Ten iterations, a checkpoint every third; fails once after reporting iteration 7."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads(Path(folder, "state.json").read_text())["it"]
    marks = Path(config["marks"])
    with open(marks / "starts.txt", "a") as f:
        f.write(f"{start}\n")
    for it in range(start + 1, 11):
        saved = None
        if it % 3 == 0:
            folder = tempfile.mkdtemp()
            Path(folder, "state.json").write_text(json.dumps({"it": it}))
            saved = Checkpoint.from_directory(folder)
        tune.report({"it": it, "loss": 1 / it}, checkpoint=saved)
        if it == 7 and not (marks / "failed-once").exists():
            (marks / "failed-once").touch()
            raise RuntimeError("simulated crash after iteration 7")


@pytest.mark.parametrize("scheduler", [None, "asha"], ids=["fifo", "asha"])
def test_max_failures_retries_a_trial_from_its_checkpoint(tmp_path: Path, scheduler: str | None) -> None:
    # with a scheduler the trial also waits for the driver's answer to every report, replayed ones too
    chosen = tune.ASHAScheduler(max_t=100, grace_period=50) if scheduler else None
    grid = tune.Tuner(resumable, param_space={"marks": str(tmp_path)},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", max_failures=1, scheduler=chosen),
                      run_config=RunConfig(name=f"retry-{scheduler}")).fit()
    (result,) = grid
    assert result.error is None
    assert (tmp_path / "starts.txt").read_text().split() == ["0", "6"]  # resumed at its checkpoint
    history = result.metrics_history
    assert [h["training_iteration"] for h in history] == list(range(1, 11))  # 7 reported twice, kept once
    assert all(h["it"] == h["training_iteration"] for h in history)  # numbered on from the checkpoint
    assert result.checkpoint is not None and result.checkpoint.path.endswith("checkpoint_000009")
    _, trials = records_by_name(f"retry-{scheduler}")
    (record,) = trials.values()
    assert (record["status"], record["restarts"], record["iterations"]) == ("completed", 1, 10)
    store = open_store()
    try:
        assert [row["step"] for row in store.trial_metrics(record["id"])] == list(range(1, 11))
        assert [c["step"] for c in store.trial_checkpoints(record["id"])] == [3, 6, 9]
    finally:
        store.close()


@pytest.mark.parametrize("how", ["resume_errored", "restart_errored"])
def test_restore_runs_errored_trials_again_from_their_checkpoint_or_from_scratch(tmp_path: Path, how: str) -> None:
    # Ray: Tuner.restore(path, trainable, resume_errored=True) / (restart_errored=True)
    space = {"marks": str(tmp_path)}
    first = tune.Tuner(resumable, param_space=space, run_config=RunConfig(name=f"errored-{how}"),
                       tune_config=tune.TuneConfig(metric="loss", mode="min")).fit()
    (failed,) = first
    assert failed.error is not None and "simulated crash after iteration 7" in str(failed.error)
    assert tune.Tuner.can_restore(first.experiment_path)
    grid = tune.Tuner.restore(first.experiment_path, resumable, **{how: True}).fit()
    (result,) = grid
    assert result.error is None and result.metrics["it"] == 10
    starts = (tmp_path / "starts.txt").read_text().split()
    assert starts == (["0", "6"] if how == "resume_errored" else ["0", "0"])
    assert [h["training_iteration"] for h in result.metrics_history] == list(range(1, 11))
    _, trials = records_by_name(f"errored-{how}")
    (record,) = trials.values()
    assert (record["status"], record["error"], record["iterations"]) == ("completed", None, 10)
    store = open_store()
    try:  # the record is the new run's: one row per step, and a restart's old checkpoints are not its own
        assert [row["step"] for row in store.trial_metrics(record["id"])] == list(range(1, 11))
        assert [c["step"] for c in store.trial_checkpoints(record["id"])] == [3, 6, 9]
    finally:
        store.close()
    # without either, a finished experiment's errored trial stays as it ended
    again = tune.Tuner.restore(first.experiment_path, resumable).fit()
    assert [r.error is None for r in again] == [True]  # (it completed above) and nothing ran again
    assert (tmp_path / "starts.txt").read_text().split() == starts


def short_quadratic(config: dict[str, Any]) -> None:
    for it in range(1, 4):
        tune.report({"loss": (config["x"] - 3) ** 2 + 1 / it, "t": time.time()})


def test_optuna_behind_a_concurrency_limiter_on_the_cluster() -> None:
    inner = OptunaSearch(seed=0)
    searcher = tune.ConcurrencyLimiter(inner, max_concurrent=2)
    grid = tune.Tuner(short_quadratic, param_space={"x": tune.uniform(0, 6)},
                      tune_config=tune.TuneConfig(num_samples=8, metric="loss", mode="min",
                                                  search_alg=searcher)).fit()
    assert len(grid) == 8 and grid.errors == []
    study = inner._study.trials
    assert [t.state for t in study] == [optuna.trial.TrialState.COMPLETE] * 8
    assert sorted(t.value for t in study) == sorted(r.metrics["loss"] for r in grid)
    assert all(t.intermediate_values.keys() == {1, 2, 3} for t in study)
    best = grid.get_best_result()
    assert math.isclose(best.metrics["loss"], min(t.value for t in study))


def counted(config: dict[str, Any]) -> None:
    with open(Path(config["marks"]) / f"{tune.get_context().get_trial_name()}.runs", "a") as f:
        f.write("run\n")
    for it in range(1, 4):
        tune.report({"loss": config["x"] + 1 / it})
    if config["x"] == 3:
        raise RuntimeError("x=3 always fails")


def test_restore_trusts_the_store_over_an_older_saved_state(tmp_path: Path) -> None:
    import cloudpickle

    from airflowless.integrity import read_signed, write_signed
    from airflowless.tune.trial import TrialStatus

    space = {"x": tune.grid_search([1, 2, 3]), "marks": str(tmp_path)}
    grid = tune.Tuner(counted, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=RunConfig(name="older-state")).fit()
    assert grid.num_errors == 1
    runs = {n: len((tmp_path / f"trial_0000{n}.runs").read_text().split()) for n in range(3)}
    assert runs == {0: 1, 1: 1, 2: 1}

    # as if the driver died before the state noticed anything after each trial's first report,
    # while the store recorded trials 0 (terminated) and 2 (errored) to their end; trial 1 was interrupted
    state_path = Path(grid.experiment_path) / "experiment_state.pkl"
    state = cloudpickle.loads(read_signed(str(state_path)))  # the state is signed: edit it as airflowless would
    for trial in state["controller"]["trials"].values():
        trial.status, trial.results, trial.error = TrialStatus.RUNNING, trial.results[:1], None
    write_signed(str(state_path), cloudpickle.dumps(state))
    _, records = records_by_name("older-state")
    store = open_store()
    try:
        store.update_trial(records["trial_00001"]["id"], status="running")
    finally:
        store.close()

    again = tune.Tuner.restore(str(state_path.parent)).fit()
    runs = {n: len((tmp_path / f"trial_0000{n}.runs").read_text().split()) for n in range(3)}
    assert runs == {0: 1, 1: 2, 2: 1}  # only the interrupted trial ran again
    by_name = {trial_name(r): r for r in again}
    for name in by_name:
        assert [h["training_iteration"] for h in by_name[name].metrics_history] == [1, 2, 3]
    assert by_name["trial_00000"].error is None and by_name["trial_00001"].error is None
    assert "x=3 always fails" in str(by_name["trial_00002"].error)
    experiment, records = records_by_name("older-state")
    assert experiment["status"] == "completed_with_errors"
    assert [records[f"trial_0000{n}"]["status"] for n in range(3)] == ["completed", "completed", "errored"]


class _Killed(BaseException):
    """The driver dies here (raised where a kill would stop it; nothing after it runs)."""


def test_restore_reuses_a_record_the_saved_state_does_not_know(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from airflowless.tune import driver as driver_module

    # the driver is killed after the turn that started trial_00001 created its record, before
    # that turn saved the state: the store has a record the saved state does not know
    real_save = driver_module.TuneDriver._save
    dead: list[bool] = []

    def save_unless_dead(loop: Any) -> None:
        if dead:
            return  # a killed driver saves nothing more
        if "trial_00001" in loop.controller.trials:
            dead.append(True)
            raise _Killed()
        real_save(loop)

    monkeypatch.setattr(driver_module.TuneDriver, "_save", save_unless_dead)
    space = {"x": tune.grid_search([1, 2, 3]), "marks": str(tmp_path)}
    tuner = tune.Tuner(counted, param_space=space, run_config=RunConfig(name="unknown-record"),
                       tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1))
    with pytest.raises(_Killed):
        tuner.fit()
    _, before = records_by_name("unknown-record")
    assert before["trial_00001"]["status"] in ("pending", "running")  # killed when it was submitted
    state = tune.Tuner.restore(tuner.path)._restored
    assert state is not None and "trial_00001" not in state["controller"]["trials"]
    store = open_store()
    try:  # nothing it reports is recorded before the state knows it
        assert store.trial_metrics(before["trial_00001"]["id"]) == []
        # as if the killed driver's searcher had suggested another config (an adaptive one may)
        store.update_trial(before["trial_00001"]["id"], config={"x": 99, "marks": str(tmp_path)})
    finally:
        store.close()

    monkeypatch.setattr(driver_module.TuneDriver, "_save", real_save)
    grid = tune.Tuner.restore(tuner.path).fit()
    experiment, records = records_by_name("unknown-record")
    assert sorted(records) == ["trial_00000", "trial_00001", "trial_00002"]
    assert records["trial_00001"]["id"] == before["trial_00001"]["id"]  # the record is the trial's again
    store = open_store()
    try:
        for result in grid:
            record = records[trial_name(result)]
            assert record["config"] == result.config
            assert [m["step"] for m in store.trial_metrics(record["id"])] == [1, 2, 3]
            assert record["status"] == ("errored" if result.config["x"] == 3 else "completed")
    finally:
        store.close()
    assert experiment["status"] == "completed_with_errors"


def _report_twice(config: dict[str, Any]) -> None:
    from airflowless import train

    for step in range(2):
        train.report({"score": config["x"] + step})


def _our_topics(dask_scheduler: Any) -> set[str]:
    return {name for name in dask_scheduler._broker._topics
            if name.startswith(("airflowless-train-", "airflowless-tune-"))}


def test_the_scheduler_forgets_the_reports_of_fits_and_experiments_that_ended(cluster_client: Any) -> None:
    # a long-lived cluster would otherwise keep every report of every fit (one topic per fit)
    from airflowless.train import DataParallelTrainer

    before = cluster_client.run_on_scheduler(_our_topics)
    trainer = DataParallelTrainer(_report_twice, train_loop_config={"x": 0},
                                  scaling_config=ScalingConfig(num_workers=2))
    assert trainer.fit().metrics["score"] == 1
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {"x": tune.grid_search([1, 2])}},
                      tune_config=tune.TuneConfig(metric="score", mode="max")).fit()
    assert grid.get_best_result().metrics["score"] == 3
    assert tune.Tuner(_report_twice, param_space={"x": tune.grid_search([1, 2])}).fit().num_errors == 0
    assert cluster_client.run_on_scheduler(_our_topics) <= before
