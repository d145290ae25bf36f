"""Each trial's reports as files in its folder (Ray's ``JsonLoggerCallback`` and ``CSVLoggerCallback``).

>>> from airflowless import tune
>>> from airflowless.tune.logger import CSVLoggerCallback, JsonLoggerCallback
>>> tune.Tuner(objective, param_space={"lr": tune.loguniform(1e-4, 1e-1)},     # doctest: +SKIP
...            run_config=tune.RunConfig(callbacks=[JsonLoggerCallback(), CSVLoggerCallback()])).fit()

As in Ray: ``params.json`` holds the trial's config, ``result.json`` one JSON
object per report (a line each), ``progress.csv`` a row per report with the
columns of the trial's first report (nested results flattened with ``/``, the
config left out; a key that first appears later is not a column). A value JSON
cannot hold is written as its text (numpy numbers and arrays as numbers and
lists); NaN as ``NaN``, as Python's ``json`` and Ray write it. A trial that
runs again appends to its files; one restarted from a checkpoint reports the
iterations after it again, so read them by ``training_iteration``, last one
wins (as in Ray). A trial folder on remote storage (an fsspec URL) gets its
files at most every 10 s, at each checkpoint and when the trial ends; they are
written to a local folder in between (a driver killed loses what it had not
put there yet).

Unlike Ray, the Tuner does not add these by itself: every report is in the
record already (``Result.metrics_dataframe``, ``airflowless experiments``), so
the files are written for those who ask for them. Ray's lines also carry the
config, the process and host; these carry the report and Tune's own fields.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import threading
import time
from typing import IO, Any

from ..callback import LoggerCallback
from ..trial import Trial
from .flat import flatten

__all__ = ["JsonLoggerCallback", "CSVLoggerCallback"]

UPLOAD_EVERY_S = 10.0  # how often a remote trial folder gets what was written since
_LOCK = threading.Lock()  # the fits of a Tuner of Trainers share their RunConfig's callbacks across threads


def _plain(value: Any) -> Any:
    """What ``json`` cannot write, as it can: numpy numbers and arrays as numbers and lists, the rest as text."""
    for convert in ("item", "tolist"):
        if callable(getattr(value, convert, None)):
            try:
                return getattr(value, convert)()
            except Exception:  # numpy's ValueError, torch's RuntimeError for a tensor of several values
                pass
    return str(value)


class _TrialFiles(LoggerCallback):
    """Files appended to in each trial's folder; a remote folder's are staged locally and put there as they grow."""

    names: tuple[str, ...] = ()  # the files a logger writes (an earlier run's are fetched to append to)

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], IO[str]] = {}  # (trial, file name) -> the file, open for appending
        self._staged: dict[str, str] = {}  # trial -> the local folder standing in for its remote one
        self._put: dict[str, float] = {}  # trial -> when its staged files last went to its remote folder

    def __getstate__(self) -> dict[str, Any]:
        # saved with the experiment's state: open files stay here; a restored trial appends to its files again
        return {**self.__dict__, "_open": {}, "_staged": {}, "_put": {}}

    def _folder(self, trial: Trial) -> str:
        if trial.local_path is not None:
            os.makedirs(trial.local_path, exist_ok=True)
            return trial.local_path
        if trial.trial_id not in self._staged:
            staged = self._staged[trial.trial_id] = tempfile.mkdtemp(prefix=f"trial-files-{trial.trial_id}-")
            if trial.path is not None:  # what an earlier run of the trial put there, to append to
                import fsspec

                fs, remote = fsspec.core.url_to_fs(trial.path)
                for name in self.names:
                    if fs.exists(f"{remote}/{name}"):
                        fs.get(f"{remote}/{name}", os.path.join(staged, name))
        return self._staged[trial.trial_id]

    def _file(self, trial: Trial, name: str) -> IO[str]:
        key = (trial.trial_id, name)
        if key not in self._open:
            self._open[key] = open(os.path.join(self._folder(trial), name), "a", encoding="utf-8",  # noqa: SIM115
                                   newline="")  # held open between reports; closed when the trial ends
        return self._open[key]

    def _written(self, trial: Trial, *, now: bool = False) -> None:
        """Put a remote trial's staged files in its folder, at most every ``UPLOAD_EVERY_S`` unless ``now``."""
        staged = self._staged.get(trial.trial_id)
        if staged is None or trial.path is None:
            return
        if not now and time.monotonic() - self._put.get(trial.trial_id, -UPLOAD_EVERY_S) < UPLOAD_EVERY_S:
            return
        import fsspec

        fs, remote = fsspec.core.url_to_fs(trial.path)
        fs.makedirs(remote, exist_ok=True)
        for name in os.listdir(staged):
            fs.put(os.path.join(staged, name), f"{remote}/{name}")
        self._put[trial.trial_id] = time.monotonic()

    def log_trial_save(self, trial: Trial) -> None:
        with _LOCK:
            self._written(trial, now=True)

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        with _LOCK:
            for key in [key for key in self._open if key[0] == trial.trial_id]:
                self._open.pop(key).close()
            self._written(trial, now=True)
            staged = self._staged.pop(trial.trial_id, None)
            self._put.pop(trial.trial_id, None)
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial in trials:
            with _LOCK:
                left = any(key[0] == trial.trial_id for key in self._open) or trial.trial_id in self._staged
            if left:
                self.log_trial_end(trial)


class JsonLoggerCallback(_TrialFiles):
    """``params.json`` (the config) when a trial starts, and a line of ``result.json`` per report."""

    names = ("params.json", "result.json")

    def log_trial_start(self, trial: Trial) -> None:
        with _LOCK, open(os.path.join(self._folder(trial), "params.json"), "w", encoding="utf-8") as f:
            json.dump(trial.config, f, indent=2, sort_keys=True, default=_plain)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        line = json.dumps(result, default=_plain) + "\n"
        with _LOCK:
            file = self._file(trial, "result.json")
            file.write(line)
            file.flush()
            self._written(trial)


class CSVLoggerCallback(_TrialFiles):
    """A row of ``progress.csv`` per report, with the columns of the trial's first report."""

    names = ("progress.csv",)

    def __init__(self) -> None:
        super().__init__()
        self._columns: dict[str, list[str]] = {}

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        row = flatten({k: v for k, v in result.items() if k != "config"})
        with _LOCK:
            file = self._file(trial, "progress.csv")
            columns = self._columns.get(trial.trial_id)
            if file.tell() == 0:  # a new file (also one a restored trial's remote folder never got)
                columns = columns or list(row)
                csv.writer(file).writerow(columns)
            elif columns is None:  # an earlier run's file: its header
                columns = self._header(file.name) or list(row)
            self._columns[trial.trial_id] = columns
            csv.DictWriter(file, columns, extrasaction="ignore").writerow(row)
            file.flush()
            self._written(trial)

    @staticmethod
    def _header(path: str) -> list[str] | None:
        """The columns of a ``progress.csv`` an earlier run of the trial wrote (None for a new file)."""
        with open(path, encoding="utf-8", newline="") as f:
            return next(csv.reader(f), None)
