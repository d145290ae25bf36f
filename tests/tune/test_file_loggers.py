"""JsonLoggerCallback and CSVLoggerCallback: a real Tuner's trial folders read back, and a remote folder."""

from __future__ import annotations

import csv
import json
import pickle
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

from airflowless import tune
from airflowless.train import RunConfig
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
        assert "late" not in rows[0] and "config" not in rows[0] and not any(k.startswith("config/") for k in rows[0])


def test_a_remote_trial_folder_gets_its_files_and_a_restored_logger_appends() -> None:
    path = "memory://file-loggers/exp/t0"
    trial = Trial("t0", {"lr": 0.1}, TrialStatus.RUNNING, path=path)
    loggers = [JsonLoggerCallback(), CSVLoggerCallback()]
    callbacks = CallbackList(loggers, {"t0": trial})
    callbacks.trial_started(trial)
    callbacks.result(trial, {"loss": 2.0, "training_iteration": 1})
    fs = fsspec.filesystem("memory")
    assert not fs.exists("/file-loggers/exp/t0/result.json")  # staged here until the trial ends
    restored = [pickle.loads(pickle.dumps(logger)) for logger in loggers]  # the experiment's state, saved
    trial.status = TrialStatus.ERRORED
    callbacks.trial_ended(trial)
    assert fs.cat("/file-loggers/exp/t0/result.json").decode().count("\n") == 1
    trial.status = TrialStatus.RUNNING  # restored and run again: its files go on
    again = CallbackList(restored, {"t0": trial})
    again.trial_started(trial)
    again.result(trial, {"loss": 1.0, "training_iteration": 2})
    trial.status = TrialStatus.TERMINATED
    again.trial_ended(trial)
    lines = fs.cat("/file-loggers/exp/t0/result.json").decode().splitlines()
    assert [json.loads(line)["loss"] for line in lines] == [2.0, 1.0]
    progress = fs.cat("/file-loggers/exp/t0/progress.csv").decode().splitlines()
    assert progress[0].split(",") == ["loss", "training_iteration"] and len(progress) == 3  # one header
    assert json.loads(fs.cat("/file-loggers/exp/t0/params.json")) == {"lr": 0.1}
    fs.rm("/file-loggers", recursive=True)
