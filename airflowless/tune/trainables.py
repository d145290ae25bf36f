"""Running a Trainer trial: its driver is a thread of the Tuner's process.

A Trainer trial's own driver logic holds no worker slot: only its ranks take
resources (by their ScalingConfig), so trials queue for those. Function trials
are Dask tasks (:mod:`.function_trial`).

The thread tells the driver (:mod:`.driver`) what happened by putting a
:class:`TrainerReport` for each report and one :class:`TrainerEnded` on its queue.
When the controller decides on each report (a scheduler that stops early, a
stopper), the recorder waits until the driver has handled the report, and rank
0 waits for that answer: the trial stops at the very report that was judged,
as a function trial does. Under FIFO nothing waits.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..settings import get_settings
from ..train.checkpoint import Checkpoint
from ..train.recorder import Recorder

__all__ = ["TrainerEnded", "TrainerReport", "TrainerTrial"]


@dataclass(frozen=True)
class TrainerReport:
    """A Trainer trial reported ``result``; ``handled`` (when the controller decides on each report) is set
    once the driver has, and the trial goes on."""

    trial_id: str
    result: dict[str, Any]
    handled: threading.Event | None = None


@dataclass(frozen=True)
class TrainerEnded:
    """A Trainer trial's fit returned (``error`` None) or failed."""

    trial_id: str
    error: str | None = None


class _TrialRecorder(Recorder):
    def __init__(self, trial_id: str, events: queue.Queue[Any], stop: threading.Event, decides: bool) -> None:
        self.trial_id, self.events, self.stop = trial_id, events, stop
        self.decides_reports = decides
        self._last = time.time()  # the fit's start, then its latest report: each report's time_this_iter_s
        self._decision_timeout_s = get_settings().decision_timeout_s  # read once, not per report

    def on_report(self, step: int, metrics: dict[str, Any], checkpoint_uri: str | None) -> None:
        now = time.time()
        result = {**metrics, "training_iteration": step, "checkpoint_uri": checkpoint_uri, "_reported_at": now,
                  "_this_iter_s": now - self._last}
        self._last = now
        if not self.decides_reports:
            self.events.put(TrainerReport(self.trial_id, result))
            return
        handled = threading.Event()  # set by the driver once the controller decided (``stop`` set on STOP)
        self.events.put(TrainerReport(self.trial_id, result, handled))
        handled.wait(timeout=self._decision_timeout_s)  # then it goes on

    def should_stop(self) -> bool:
        return self.stop.is_set()


class TrainerTrial(threading.Thread):
    """A Trainer trial: ``trainer.with_overrides(config)`` fitted in this thread."""

    def __init__(self, trainer: Any, config: dict[str, Any], trial_id: str, storage_dir: str,
                 checkpoint: str | None, iteration: int, events: queue.Queue[Any], decides: bool = False) -> None:
        super().__init__(name=f"airflowless-trial-{trial_id}", daemon=True)
        self.trainer, self.config, self.trial_id = trainer, config, trial_id
        self.storage_dir, self.checkpoint, self.events = storage_dir, checkpoint, events
        self.iteration = iteration  # the checkpoint's report: the run numbers its reports on from it
        self.stop_requested = threading.Event()
        self.decides = decides  # the controller decides on each report: the run waits for it

    def run(self) -> None:
        try:
            trainer = self.trainer.with_overrides(self.config)
            if self.checkpoint:
                trainer.resume_from_checkpoint = Checkpoint(self.checkpoint)
            result = trainer.fit_with_recorder(
                _TrialRecorder(self.trial_id, self.events, self.stop_requested, self.decides),
                storage_dir=self.storage_dir, name=self.trial_id, start_step=self.iteration,
                scope=os.path.dirname(self.storage_dir.rstrip("/")))  # trials of one experiment share prepared data
        except BaseException as exc:  # reported to the controller as the trial's error
            self.events.put(TrainerEnded(self.trial_id, f"{type(exc).__name__}: {exc}"))
            return
        if result.error is not None and not self.stop_requested.is_set():
            self.events.put(TrainerEnded(self.trial_id, str(result.error)))
        else:
            self.events.put(TrainerEnded(self.trial_id))
