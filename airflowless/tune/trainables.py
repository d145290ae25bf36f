"""Running one trial: a function as a Dask task, or a Trainer whose driver is a thread here.

A function trial is one Dask task declaring the trial's resources; it reports
through Dask events, like a training rank. A Trainer trial's own driver logic
runs in a thread of the Tuner's process, holding no worker slot: only its
ranks take resources (by their ScalingConfig), so trials queue for those.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from ..train.checkpoint import Checkpoint
from ..train.context import Session, StopRequested, TrainContext, session_scope
from ..train.recorder import Recorder

__all__ = ["run_function_trial", "TrainerTrial"]


def run_function_trial(fn: Any, config: dict[str, Any], trial_id: str, topic: str, storage_dir: str,
                       checkpoint: str | None, stop_event: str | None, start_iteration: int) -> int:
    """The body of a function trial's task; returns how many reports it sent."""
    from distributed import get_worker

    worker = get_worker()
    sent = [0]

    def emit(message: dict[str, Any]) -> None:
        sent[0] += 1
        worker.log_event(topic, {"trial": trial_id, **message})

    stop = None
    if stop_event:
        # The driver answers every report with CONTINUE or STOP: waiting for it keeps early
        # stopping exact (a trial does not run on past the rung where a scheduler stops it).
        from distributed import Queue

        decisions = Queue(stop_event)

        def stop() -> bool:
            try:
                return bool(decisions.get(timeout=300) == "STOP")
            except TimeoutError:
                return False
    session = Session(TrainContext(trial_name=trial_id, trial_id=trial_id, trial_dir=storage_dir), emit,
                      storage_dir, Checkpoint(checkpoint) if checkpoint else None, {}, stop,
                      start_iteration=start_iteration)
    with session_scope(session):
        try:
            returned = fn(config)
            if isinstance(returned, dict):
                session.report(returned)
        except StopRequested:
            pass
    return sent[0]


class _TrialRecorder(Recorder):
    def __init__(self, trial_id: str, events: queue.Queue[Any], stop: threading.Event) -> None:
        self.trial_id, self.events, self.stop = trial_id, events, stop

    def on_report(self, step: int, metrics: dict[str, Any], checkpoint_uri: str | None) -> None:
        self.events.put(("result", self.trial_id, {**metrics, "training_iteration": step,
                                                    "checkpoint_uri": checkpoint_uri}))

    def should_stop(self) -> bool:
        return self.stop.is_set()


class TrainerTrial(threading.Thread):
    """A Trainer trial: ``trainer.with_overrides(config)`` fitted in this thread."""

    def __init__(self, trainer: Any, config: dict[str, Any], trial_id: str, storage_dir: str,
                 checkpoint: str | None, events: queue.Queue[Any]) -> None:
        super().__init__(name=f"airflowless-trial-{trial_id}", daemon=True)
        self.trainer, self.config, self.trial_id = trainer, config, trial_id
        self.storage_dir, self.checkpoint, self.events = storage_dir, checkpoint, events
        self.stop_requested = threading.Event()

    def run(self) -> None:
        try:
            trainer = self.trainer.with_overrides(self.config)
            if self.checkpoint:
                trainer.resume_from_checkpoint = Checkpoint(self.checkpoint)
            result = trainer._fit(_TrialRecorder(self.trial_id, self.events, self.stop_requested),
                                  storage_dir=self.storage_dir, name=self.trial_id)
        except BaseException as exc:  # reported to the controller as the trial's error
            self.events.put(("error", self.trial_id, f"{type(exc).__name__}: {exc}"))
            return
        if result.error is not None and not self.stop_requested.is_set():
            self.events.put(("error", self.trial_id, str(result.error)))
        else:
            self.events.put(("done", self.trial_id, None))
