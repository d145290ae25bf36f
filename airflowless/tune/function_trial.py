"""A function trial: the user's function in a thread of a Dask worker, driven by one task at a time.

The task that starts a trial holds the trial's resources; it runs the function
in a thread of its own and waits for one of three outcomes: the function
returned, raised, or was paused. Each report waits for the driver's answer
(when a scheduler or stopper needs one): CONTINUE, STOP, or PAUSE. On PAUSE the
function's thread stays blocked inside ``report`` — its state in memory — and
the task returns, freeing the trial's slot. A later ``resume_function_trial``
task, placed on the same worker, wakes the thread and waits for it in the same
way; ``release_function_trial`` lets a paused run end instead.

Lifecycle of one run on a worker::

    run_function_trial ──> running ──PAUSE──> parked ──resume_function_trial──> running ──> ended
                                                 └──release_function_trial / timeout──> ended

A parked run lives in this worker process only: if the worker leaves, the
resume task lands elsewhere, finds nothing and raises :class:`ParkedTrialLost`;
the Tuner then restarts the trial from its checkpoint.

What a run says goes to the Tuner's topic, in order: ``{"trial", "reports": [...]}``
messages, then one ``"outcome"`` message when its task ends or parks (the task's
return value, sent with the last reports). A report the driver must answer, or
one carrying a checkpoint, goes at once; otherwise reports wait on the worker at
most ``REPORT_BATCH_S`` and go together, so a trial of many quick reports costs
the scheduler and the driver a message or two, not one per report.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from typing import Any

from ..pickled import Sealed
from ..settings import get_settings
from ..train.checkpoint import Checkpoint
from ..train.context import Session, StopRequested, TrainContext, session_scope

__all__ = ["run_function_trial", "resume_function_trial", "release_function_trial", "stop_function_trial",
           "ParkedTrialLost"]

REPORT_BATCH_S = 0.05  # the longest a report waits on the worker to go with the next ones

_parked: dict[str, _Run] = {}  # run key -> a paused run waiting on this worker
_active: dict[str, _Run] = {}  # run key -> a run whose function is alive on this worker
_lock = threading.Lock()


class ParkedTrialLost(RuntimeError):
    """The paused run to resume is not on this worker (its worker left, or it timed out)."""


class _Run:
    """One run of a function trial on this worker: its thread and the hand-over to the task driving it."""

    def __init__(self, key: str, decisions: str | None, topic: str, trial_id: str, worker: Any) -> None:
        self.key = key
        self.decisions_name = decisions
        self.topic, self.trial_id, self.worker = topic, trial_id, worker
        self.outcomes: queue.Queue[tuple[str, BaseException | None]] = queue.Queue()  # for the driving task
        self.commands: queue.Queue[str] = queue.Queue()  # RESUME | STOP, for a parked run
        self.sent = 0
        self.stop_requested = False  # set by stop_function_trial: the run stops at its next report
        self._decisions: Any = None
        self._unsent: list[dict[str, Any]] = []
        self._last = time.time()  # the run's start, then its latest report (or resume): time_this_iter_s
        settings = get_settings()  # read once: a report must not parse the environment
        self._decision_timeout_s, self._park_timeout_s = settings.decision_timeout_s, settings.park_timeout_s
        self._sending = threading.Lock()  # keeps the topic's messages in the order of the reports

    def report(self, message: dict[str, Any]) -> None:
        """A report for the Tuner: sent now if it is answered or carries a checkpoint, else soon (see the module)."""
        now = float(message.get("time") or time.time())
        message["this_iter_s"], self._last = now - self._last, now
        with self._sending:
            self.sent += 1
            self._unsent.append(message)
        if self.decisions_name is not None or message.get("checkpoint"):
            self.send()

    def send(self, **outcome: Any) -> None:
        """Send the reports not sent yet (and ``outcome``, if given) in one message on the Tuner's topic."""
        with self._sending:
            reports, self._unsent = self._unsent, []
            if reports or outcome:
                self.worker.log_event(self.topic, {"trial": self.trial_id, "reports": reports, **outcome})

    def should_stop(self) -> bool:
        """Called after each report: wait for the driver's answer (and park on PAUSE)."""
        if self.stop_requested:
            return True
        if self.decisions_name is None:
            return False
        if self._decisions is None:
            from distributed import Queue

            self._decisions = Queue(self.decisions_name)
        try:
            decision = self._decisions.get(timeout=self._decision_timeout_s)
        except TimeoutError:
            return False
        if decision != "PAUSE":
            return bool(decision == "STOP")
        with _lock:
            _parked[self.key] = self
        self.outcomes.put(("paused", None))
        try:
            command = self.commands.get(timeout=self._park_timeout_s)  # an abandoned experiment
        except queue.Empty:
            command = "STOP"
        with _lock:
            _parked.pop(self.key, None)
        self._last = time.time()  # the time parked is not the next iteration's (as in Ray)
        return command != "RESUME"

    def drive(self) -> dict[str, Any]:
        """Wait, in the task's thread, until the run ends or parks; what the Tuner needs to know.

        It is also sent on the Tuner's topic, with the run's last reports, naming this task:
        the Tuner reads it there instead of fetching the task's result from this worker.
        While it waits, it sends the reports that waited ``REPORT_BATCH_S``.
        """
        while True:
            try:
                kind, error = self.outcomes.get(timeout=REPORT_BATCH_S)
                break
            except queue.Empty:
                self.send()
        if error is not None:
            self.send()  # the reports before the error
            raise error
        said = {"sent": self.sent, "parked": kind == "paused", "worker": self.worker.address}
        self.send(event="outcome", task=self.worker.get_current_task(), **said)
        return said


def run_function_trial(fn: Any, config: dict[str, Any], trial_id: str, topic: str, storage_dir: str,
                       checkpoint: str | None, decisions: str | None, start_iteration: int,
                       run_key: str) -> dict[str, Any]:
    """The task starting a function trial: returns ``{"sent", "parked", "worker"}`` when it ends or pauses.

    ``fn``: the trainable, or a :class:`~.pickled.Sealed` one (opened here, on the worker)."""
    from distributed import get_worker

    if isinstance(fn, Sealed):
        fn = fn.open()
    run = _Run(run_key, decisions, topic, trial_id, get_worker())
    experiment = storage_dir.rstrip("/").rpartition("/")[0].rpartition("/")[2]  # <storage>/<experiment>/<trial>
    session = Session(TrainContext(trial_name=trial_id, trial_id=trial_id, trial_dir=storage_dir,
                                   experiment_name=experiment), run.report,
                      storage_dir, Checkpoint(checkpoint) if checkpoint else None, {}, run.should_stop,
                      start_iteration=start_iteration)

    def body() -> None:
        error: BaseException | None = None
        with session_scope(session):
            try:
                returned = fn(config)
                if isinstance(returned, dict):
                    session.report(returned)
            except StopRequested:
                pass
            except BaseException as exc:  # handed to the driving task, which raises it
                error = exc
        with _lock:
            _active.pop(run_key, None)
        run.outcomes.put(("ended", error))

    with _lock:
        _active[run_key] = run
    run.send(event="started")  # it has its worker and resources now: the record says running, not pending

    # the thread sees this task's worker (get_worker, get_client) through the copied context
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(body,), name=f"airflowless-trial-{trial_id}", daemon=True).start()
    return run.drive()


def resume_function_trial(run_key: str) -> dict[str, Any]:
    """The task resuming a paused run on its worker; returns as :func:`run_function_trial` does."""
    with _lock:
        run = _parked.pop(run_key, None)
    if run is None:
        raise ParkedTrialLost(f"the paused run {run_key} is not on this worker")
    run.commands.put("RESUME")
    return run.drive()


def release_function_trial(run_key: str) -> bool:
    """Let a paused run end (its function sees a stop); False if it was not here."""
    with _lock:
        run = _parked.pop(run_key, None)
    if run is None:
        return False
    run.commands.put("STOP")
    return True


def stop_function_trial(run_key: str) -> bool:
    """Ask a run on this worker to stop at its next report (run with ``Client.run``, beside the
    task threads, since the run's task holds its slot); False if it is not here."""
    with _lock:
        run = _active.get(run_key)
    if run is None:
        return False
    run.stop_requested = True
    return True
