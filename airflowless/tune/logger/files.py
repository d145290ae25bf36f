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
lists). A trial that runs again appends to its files. A trial folder on remote
storage (an fsspec URL) gets its files when the trial ends, written to a local
folder until then.

Unlike Ray, the Tuner does not add these by itself: every report is in the
record already (``Result.metrics_dataframe``, ``airflowless experiments``), so
the files are written for those who ask for them.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from typing import IO, Any

from ..callback import LoggerCallback
from ..trial import Trial
from .flat import flatten

__all__ = ["JsonLoggerCallback", "CSVLoggerCallback"]


def _plain(value: Any) -> Any:
    """What ``json`` cannot write, as it can: numpy numbers and arrays as numbers and lists, the rest as text."""
    for convert in ("item", "tolist"):
        if callable(getattr(value, convert, None)):
            try:
                return getattr(value, convert)()
            except (TypeError, ValueError):
                pass
    return str(value)


class _TrialFiles(LoggerCallback):
    """Files appended to in each trial's folder; a remote folder's are staged locally and put there at the end."""

    names: tuple[str, ...] = ()  # the files a logger writes (an earlier run's are fetched to append to)

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], IO[str]] = {}  # (trial, file name) -> the file, open for appending
        self._staged: dict[str, str] = {}  # trial -> the local folder standing in for its remote one

    def __getstate__(self) -> dict[str, Any]:
        # saved with the experiment's state: open files stay here; a restored trial appends to its files again
        return {**self.__dict__, "_open": {}, "_staged": {}}

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

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        for key in [key for key in self._open if key[0] == trial.trial_id]:
            self._open.pop(key).close()
        staged = self._staged.pop(trial.trial_id, None)
        if staged is None:
            return
        if trial.path is not None:
            import fsspec

            fs, remote = fsspec.core.url_to_fs(trial.path)
            fs.makedirs(remote, exist_ok=True)
            for name in os.listdir(staged):
                fs.put(os.path.join(staged, name), f"{remote}/{name}")
        shutil.rmtree(staged, ignore_errors=True)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial in trials:
            if any(key[0] == trial.trial_id for key in self._open) or trial.trial_id in self._staged:
                self.log_trial_end(trial)


class JsonLoggerCallback(_TrialFiles):
    """``params.json`` (the config) when a trial starts, and a line of ``result.json`` per report."""

    names = ("params.json", "result.json")

    def log_trial_start(self, trial: Trial) -> None:
        with open(os.path.join(self._folder(trial), "params.json"), "w", encoding="utf-8") as f:
            json.dump(trial.config, f, indent=2, sort_keys=True, default=_plain)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        file = self._file(trial, "result.json")
        file.write(json.dumps(result, default=_plain) + "\n")
        file.flush()


class CSVLoggerCallback(_TrialFiles):
    """A row of ``progress.csv`` per report, with the columns of the trial's first report."""

    names = ("progress.csv",)

    def __init__(self) -> None:
        super().__init__()
        self._columns: dict[str, list[str]] = {}

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        row = flatten({k: v for k, v in result.items() if k != "config"})
        file = self._file(trial, "progress.csv")
        columns = self._columns.get(trial.trial_id)
        if columns is None:
            columns = self._columns[trial.trial_id] = self._header(file.name) or list(row)
            if file.tell() == 0:
                csv.writer(file).writerow(columns)
        csv.DictWriter(file, columns, extrasaction="ignore").writerow(row)
        file.flush()

    @staticmethod
    def _header(path: str) -> list[str] | None:
        """The columns of a ``progress.csv`` an earlier run of the trial wrote (None for a new file)."""
        with open(path, encoding="utf-8", newline="") as f:
            return next(csv.reader(f), None)
