"""JsonLoggerCallback and CSVLoggerCallback: a real Tuner's trial folders read back, and a remote folder."""

from __future__ import annotations

import csv
import json
import pickle
import threading
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

from airflowless import tune
from airflowless.train import Result, RunConfig
from airflowless.tune.callback import CallbackList
from airflowless.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from airflowless.tune.trial import Trial, TrialStatus


def objective(config: dict[str, Any]) -> None:
    for step in range(1, 4):
        if config["x"] == 3 and step == 2:
            raise ValueError("x=3 fails at its second report")
        extra = {"late": step} if step > 1 else {}  # a key the first report lacks: no CSV column
        tune.report({"loss": config["x"] * 10 + step, "nested": {"acc": np.float32(step / 4)}, "note": "text",
                     "vector": [0, 1], **extra})


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.usefixtures("cluster_client", "home")
def test_a_tuner_writes_params_results_and_progress_in_each_trial_folder() -> None:
    grid = tune.Tuner(objective, param_space={"x": tune.grid_search([1, 2, 3]), "model": {"depth": 2}},
                      run_config=RunConfig(name="files", callbacks=[JsonLoggerCallback(), CSVLoggerCallback()])).fit()
    assert grid.num_errors == 1
    for result in grid:
        x, folder = result.config["x"], Path(result.path)
        steps = 1 if x == 3 else 3
        assert json.loads((folder / "params.json").read_text()) == {"x": x, "model": {"depth": 2}}
        reports = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
        assert [(r["training_iteration"], r["loss"]) for r in reports] == [(s, x * 10 + s) for s in range(1, steps + 1)]
        assert [r["nested"]["acc"] for r in reports] == [s / 4 for s in range(1, steps + 1)]  # numpy as numbers
        assert reports[0]["vector"] == [0, 1] and reports[0]["note"] == "text"
        rows = _rows(folder / "progress.csv")
        assert [(int(r["training_iteration"]), float(r["loss"]), float(r["nested/acc"])) for r in rows] == [
            (s, x * 10 + s, s / 4) for s in range(1, steps + 1)]
        assert "late" not in rows[0] and ("late" in reports[-1]) == (steps > 1)  # first in the 2nd report: no column


def test_a_remote_trial_folder_gets_its_files_as_they_grow_and_a_restored_logger_appends() -> None:
    fs = fsspec.filesystem("memory")
    remote = "/file-loggers/exp/t0"
    trial = Trial("t0", {"lr": 0.1}, TrialStatus.RUNNING, path=f"memory://{remote}")
    loggers = [JsonLoggerCallback(), CSVLoggerCallback()]
    callbacks = CallbackList(loggers, {"t0": trial})
    callbacks.trial_started(trial)

    def lines(name: str) -> list[str]:
        return fs.cat(f"{remote}/{name}").decode().splitlines() if fs.exists(f"{remote}/{name}") else []

    callbacks.result(trial, {"loss": 3.0, "training_iteration": 1})
    assert len(lines("result.json")) == 1 and len(lines("progress.csv")) == 2  # the first report goes at once
    callbacks.result(trial, {"loss": 2.0, "training_iteration": 2})
    assert len(lines("result.json")) == 1  # then at most every UPLOAD_EVERY_S...
    callbacks.result(trial, {"loss": 1.5, "training_iteration": 3, "checkpoint_uri": "memory://ckpt/3"})
    assert len(lines("result.json")) == 3  # ...or with a checkpoint

    # the driver dies here; the experiment's saved state restores the loggers, and the trial goes on
    restored = [pickle.loads(pickle.dumps(logger)) for logger in loggers]
    fresh_csv = CSVLoggerCallback()  # a logger that never saw the trial, over its existing progress.csv
    again = CallbackList([*restored, fresh_csv], {"t0": trial})
    again.trial_started(trial)
    again.result(trial, {"loss": 1.0, "training_iteration": 4})
    trial.status = TrialStatus.TERMINATED
    again.trial_ended(trial)
    assert [json.loads(line)["loss"] for line in lines("result.json")] == [3.0, 2.0, 1.5, 1.0]
    assert lines("progress.csv") == ["loss,training_iteration", "3.0,1", "2.0,2", "1.5,3", "1.0,4", "1.0,4"]
    assert json.loads(fs.cat(f"{remote}/params.json")) == {"lr": 0.1}

    # a restored logger whose trial's remote folder never got its file writes the header again
    fs.rm(f"{remote}/progress.csv")
    other = pickle.loads(pickle.dumps(restored[1]))
    trial.status = TrialStatus.RUNNING
    last = CallbackList([other], {"t0": trial})
    last.result(trial, {"loss": 0.5, "training_iteration": 5})
    trial.status = TrialStatus.TERMINATED
    last.trial_ended(trial)
    assert lines("progress.csv") == ["loss,training_iteration", "0.5,5"]
    fs.rm("/file-loggers", recursive=True)


def test_fits_in_threads_that_share_a_trainers_callbacks_write_their_own_folders(tmp_path: Path) -> None:
    """A Tuner of Trainers runs its trials' fits in threads sharing the Trainer's RunConfig(callbacks=...)."""
    logger = JsonLoggerCallback()
    started = threading.Barrier(2)

    def fit(name: str) -> None:
        logger.on_start(name, {"name": name}, str(tmp_path / name))
        started.wait(timeout=10)  # both fits are running before either reports
        for step in (1, 2):
            logger.on_report({"fit": name, "training_iteration": step}, None)
        logger.on_end(Result(metrics={"fit": name}, checkpoint=None))

    threads = [threading.Thread(target=fit, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for name in ("a", "b"):
        reports = [json.loads(line) for line in (tmp_path / name / "result.json").read_text().splitlines()]
        assert [(r["fit"], r["training_iteration"]) for r in reports] == [(name, 1), (name, 2)]


def test_values_json_cannot_hold_are_written_as_numbers_lists_or_text(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    trial = Trial("t", {}, TrialStatus.RUNNING, path=str(tmp_path))
    callbacks = CallbackList([JsonLoggerCallback()], {"t": trial})
    callbacks.result(trial, {"tensor": torch.ones(2), "scalar": np.float16(0.5), "obj": object,
                             "training_iteration": 1})
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["tensor"] == [1.0, 1.0] and written["scalar"] == 0.5 and written["obj"] == "<class 'object'>"
