"""How fit() fails: driver errors stop the ranks, record errors do not stop training, bad data fails early.

On the real 2-worker cluster of the test session.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from airflowless import data, train, tune
from airflowless.errors import TrainingDataError
from airflowless.train import DataParallelTrainer, RunConfig, ScalingConfig
from airflowless.train.xgboost import XGBoostTrainer
from tests.support.eventually import eventually

pytestmark = pytest.mark.usefixtures("cluster_client", "home")

XGB_PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss"], "max_depth": 3}


def _rank_tasks(client: Any) -> list[str]:
    def read(dask_scheduler: Any) -> list[str]:
        return [str(key) for key in dask_scheduler.tasks if "-rank" in str(key)]

    return client.run_on_scheduler(read)  # type: ignore[no-any-return]


def _used_resources(client: Any) -> dict[str, dict[str, float]]:
    """The resources each worker's running tasks hold, as placement counts them.

    Not ``WorkerState.used_resources``: Dask's work stealing leaves that count wrong
    after a steal (see ``worker_resources``), and earlier tests on this cluster steal.
    """
    from airflowless._dask_internals import worker_resources
    from airflowless.train.worker_group import is_rank_key

    found = worker_resources(client, is_rank_key)
    return {addr: {k: v for k, v in used.items() if v} for addr, (_, used, _) in found.items()}


def _long_loop(config: dict[str, Any]) -> None:
    """Reports for minutes unless stopped; leaves a file when its rank ends."""
    rank = train.get_context().world_rank
    try:
        for step in range(4_000):
            train.report({"step": step})
            time.sleep(0.05)
    finally:
        Path(config["out"], f"ended-{rank}").write_text("ended")


class _FailingCallback:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def on_report(self, metrics: dict[str, Any], checkpoint: Any) -> None:
        if metrics["step"] == 2:
            raise self.error


def _short_loop() -> None:
    train.report({"ok": 1})


@pytest.mark.parametrize("error", [RuntimeError("callback broke"), KeyboardInterrupt()],
                         ids=["RuntimeError", "KeyboardInterrupt"])
def test_an_error_in_the_driver_stops_the_ranks_and_frees_their_resources(
        error: BaseException, cluster_client: Any, tmp_path: Path) -> None:
    from airflowless.store import open_store

    out = tmp_path / "ranks"
    out.mkdir()
    trainer = DataParallelTrainer(
        _long_loop, train_loop_config={"out": str(out)}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=f"driver-error-{type(error).__name__}", callbacks=[_FailingCallback(error)],
                             verbose=0))
    with pytest.raises(type(error)) as raised:
        trainer.fit()
    assert raised.value is error

    # both ranks' loops ended (they run for minutes otherwise), the scheduler holds no rank task
    # and no declared resource, and a new fit of two ranks gets both workers
    eventually(lambda: sorted(p.name for p in out.iterdir()) == ["ended-0", "ended-1"], timeout=30)
    eventually(lambda: _rank_tasks(cluster_client) == [], timeout=30)
    eventually(lambda: all(not used for used in _used_resources(cluster_client).values()), timeout=30)
    again = DataParallelTrainer(_short_loop, scaling_config=ScalingConfig(num_workers=2),
                                run_config=RunConfig(verbose=0)).fit()
    assert again.error is None and again.metrics == {"ok": 1}

    store = open_store()  # the record does not say "running" for a fit that left
    try:
        experiment = store.find_experiment(f"driver-error-{type(error).__name__}")
        assert experiment is not None and experiment["status"] == "errored"
        assert type(error).__name__ in (experiment["error"] or "")
    finally:
        store.close()


def _reporting_loop() -> None:
    for step in range(6):
        train.report({"step": step})
        time.sleep(0.05)


class _DropMetricsTable:
    """Breaks the store under the running fit: the metrics table goes after the first report."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def on_report(self, metrics: dict[str, Any], checkpoint: Any) -> None:
        if metrics["step"] == 0:
            with sqlite3.connect(self.db) as conn:
                conn.execute("DROP TABLE metrics")


def test_a_record_write_that_fails_is_logged_and_training_goes_on(
        home: Path, caplog: pytest.LogCaptureFixture) -> None:
    from airflowless.settings import get_settings
    from airflowless.store import open_store

    open_store().close()  # the store exists before the fit
    db = Path(get_settings().db_url.removeprefix("sqlite:///"))
    assert db.exists()
    trainer = DataParallelTrainer(_reporting_loop, scaling_config=ScalingConfig(num_workers=2),
                                  run_config=RunConfig(name="broken-store", callbacks=[_DropMetricsTable(db)],
                                                       verbose=0))
    with caplog.at_level(logging.DEBUG, logger="airflowless.train.recorder"):
        result = trainer.fit()
    assert result.error is None
    assert [row["step"] for row in result.metrics_history] == list(range(6))  # every report reached the driver
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "airflowless.train.recorder"]
    assert len(warnings) == 1 and "could not record report 2 in the store" in warnings[0].getMessage()
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) >= 4  # the later ones, quietly
    with sqlite3.connect(db) as conn:  # the writes that do not need the metrics table went on
        assert conn.execute("SELECT status FROM experiments WHERE name = 'broken-store'").fetchone() == (
            "terminated",)


# -- data that cannot be trained on ------------------------------------------------------
def _frame(rows: int) -> pd.DataFrame:
    return pd.DataFrame({"x": [float(i) for i in range(rows)], "label": [i % 2 for i in range(rows)]})


@pytest.mark.parametrize(("datasets", "match"), [
    ({"train": _frame(1)}, r"needs at least one row of dataset 'train' on each of the 2 rank\(s\) that use it; "
                           r"got 1 row\(s\) in all, none for rank\(s\) \[1\]: give it more rows, or fewer ranks"),
    ({"train": _frame(100), "valid": _frame(1)}, r"dataset 'valid' .* got 1 row\(s\) in all"),
    ({"train": _frame(0)}, r"got dataset 'train' with no rows .*at least one row for each of its 2 rank\(s\)"),
    ({"train": _frame(100).rename(columns={"label": "y"})}, r"label_column 'label' is not in dataset 'train'; "
                                                            r"its columns are \['x', 'y'\]"),
], ids=["one-train-row", "one-valid-row", "no-rows", "no-label"])
def test_data_too_small_or_without_the_label_fails_before_ranks_start(
        datasets: dict[str, pd.DataFrame], match: str, cluster_client: Any) -> None:
    from distributed import get_task_stream

    trainer = XGBoostTrainer(label_column="label", params=XGB_PARAMS, num_boost_round=2,
                             scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0),
                             datasets={name: data.from_pandas(frame) for name, frame in datasets.items()})
    with get_task_stream(cluster_client) as tasks, pytest.raises(TrainingDataError, match=match):
        trainer.fit()
    assert [t["key"] for t in tasks.data if "-rank" in str(t["key"])] == []  # no rank ever ran


def test_the_tuner_error_names_the_first_trial_error() -> None:
    trainer = XGBoostTrainer(label_column="label", params=XGB_PARAMS, num_boost_round=2,
                             scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0),
                             datasets={"train": data.from_pandas(_frame(1))})
    grid = tune.Tuner(trainer, param_space={"params": {"eta": tune.uniform(0.1, 0.3)}},
                      tune_config=tune.TuneConfig(num_samples=2, metric="train-logloss", mode="min")).fit()
    assert grid.num_errors == 2
    with pytest.raises(ValueError, match=r"no trial reported 'train-logloss'; the trials reported \[\]; "
                                         r"2 of 2 trial\(s\) failed, the first with: TrainingDataError: "
                                         r"XGBoostTrainer needs at least one row of dataset 'train'"):
        grid.get_best_result()


FINISHED_RANK_LOST = """
import os, sys, threading
from pathlib import Path
import airflowless
from airflowless import train
from airflowless.train import DataParallelTrainer, ScalingConfig
from tests.support.eventually import eventually
from tests.support.workers import kill_worker

def loop(config):
    rank = train.get_context().world_rank
    if rank == 1:  # finishes at once and says where it ran
        with open(config["out"] + "/rank1-runs", "a") as runs:
            runs.write(f"{os.getpid()}\\n")
        return
    from distributed import Event
    assert Event("go").wait(timeout=90), "never told to go on"
    train.report({"done": 1})

client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
out = os.getcwd()
outcome = {}
fit = threading.Thread(target=lambda: outcome.setdefault("result", DataParallelTrainer(
    loop, train_loop_config={"out": out}, scaling_config=ScalingConfig(num_workers=2)).fit()))
fit.start()
runs = Path(out, "rank1-runs")
victim = int(eventually(lambda: runs.exists() and runs.read_text().split()[0], timeout=90,
                        message="rank 1 never ran"))
import time
time.sleep(2)  # rank 1's task has ended and the driver has taken its result
kill_worker(client, victim)
time.sleep(2)  # time for the scheduler to run a lost finished rank again, if it would
from distributed import Event
Event("go").set()
fit.join(timeout=120)
assert not fit.is_alive(), "fit() hangs after a finished rank's worker died"
print("RANK1-RUNS", len(runs.read_text().split()), outcome["result"].metrics)
airflowless.shutdown()
"""


@pytest.mark.timeout(300)
def test_a_finished_rank_whose_worker_dies_is_not_run_again_alone(tmp_path: Path) -> None:
    """Rank 1 ends first, then its worker is killed: the fit ends, and rank 1 ran once.

    Dask recomputes a lost result that a client still holds; a rank run again
    alone would wait for partners that never come (seen across hosts).
    """
    import os
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", FINISHED_RANK_LOST], cwd=tmp_path, capture_output=True, text=True,
                          timeout=280, env={**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"),
                                            "PYTHONPATH": root})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "RANK1-RUNS 1 " in done.stdout, done.stdout[-3000:]


def _loop_whose_network_fails(config: dict[str, Any]) -> None:
    """Raises XGBoost's own error, worded as its collective words a refused connection, ``config["fail"]``
    times (one mark file per failure), then reports."""
    from xgboost.core import XGBoostError

    marks = sorted(Path(config["marks"]).iterdir())
    if train.get_context().world_rank == 0 and len(marks) < config["fail"]:
        Path(config["marks"], f"failed-{len(marks)}").write_text("")
        raise XGBoostError(config["error"])
    train.report({"attempt": len(marks)})


NETWORK_ERROR = ("[10:02:11] /workspace/src/collective/result.cc:83: [comm.cc:220|10:02:11]:\n"
                 "- [socket.h:348|10:02:11]: Socket error. Connection refused")


@pytest.mark.parametrize(("error", "fail", "ends"), [
    (NETWORK_ERROR, 1, "completed after one more attempt"),
    (NETWORK_ERROR, 2, "failed: one more attempt only"),
    ("[10:02:11] src/learner.cc:712: Check failed: the label must be in [0, 1]", 1, "failed: not the network"),
], ids=["network-once", "network-twice", "not-network"])
def test_a_fit_gets_one_more_attempt_when_the_ranks_network_failed(
        tmp_path: Path, error: str, fail: int, ends: str, caplog: pytest.LogCaptureFixture) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    trainer = DataParallelTrainer(_loop_whose_network_fails, scaling_config=ScalingConfig(num_workers=2),
                                  train_loop_config={"marks": str(marks), "fail": fail, "error": error})
    with caplog.at_level(logging.WARNING, logger="airflowless.train.trainer"):
        if ends.startswith("completed"):
            result = trainer.fit()
            assert result.error is None and result.metrics == {"attempt": 1}
        else:
            with pytest.raises(train.TrainingFailedError, match="XGBoostError") as raised:
                trainer.fit()
            assert f"{fail} failure(s), FailureConfig.max_failures=0" in str(raised.value)
    retried = [r.getMessage() for r in caplog.records if "network failed" in r.getMessage()]
    assert len(retried) == (0 if ends.endswith("not the network") else 1), retried
    if retried:
        assert "Connection refused" in retried[0] and "once more" in retried[0]
