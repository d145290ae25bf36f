"""The Tune driver: carries out the controller's actions on the Dask cluster and turns what happens there
into the controller's events (:mod:`.controller` decides; nothing here does).

Function trials run as Dask tasks (:mod:`.function_trial`) that send their
reports and their outcome on the experiment's event topic; Trainer trials run
in threads of this process (:mod:`.trainables`) and put theirs on the same
queue. Each turn of :meth:`TuneDriver.run` asks the controller for what to start
(:class:`~.controller.Tick`), submits the new trials as one graph, hands every
report, end and failure to :meth:`~.controller.TuneController.handle` and
carries out its answer (a decision sent to the trial's task, a paused run parked
or released), records everything in the store (:mod:`.recording`), and saves
the experiment state every few seconds.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import queue
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ClusterLostError
from ..integrity import current_key
from ..pickled import PickledOnce
from ..runtime.topics import Subscription
from ..train.trainer import BaseTrainer
from .callback import CallbackList
from .controller import (
    Completed,
    Failed,
    ParkLost,
    Pause,
    Reported,
    Resume,
    RunPaused,
    Start,
    StopRequested,
    Tick,
    TuneController,
)
from .function_trial import (
    ParkedTrialLost,
    release_function_trial,
    resume_function_trial,
    run_function_trial,
    stop_function_trial,
)
from .recording import ExperimentRecorder
from .trainables import TrainerEnded, TrainerReport, TrainerTrial
from .trial import TrialStatus
from .wrappers import ParameterizedTrainable, run_parameterized_trial

if TYPE_CHECKING:
    from .tuner import Tuner

__all__ = ["TuneDriver", "TopicMessage", "ControlRequest"]


@dataclass(frozen=True)
class TopicMessage:
    """What a function trial's run sent on the experiment's topic: reports, its start, its outcome."""

    message: dict[str, Any]


@dataclass(frozen=True)
class ControlRequest:
    """A control-plane request for this experiment (:mod:`airflowless.control.actions`): stop it, or one trial."""

    message: dict[str, Any]


@dataclass
class _TrialRun:
    """What the driver keeps of one trial while the experiment runs: one record per trial."""

    seen: set[int] = field(default_factory=set)  # iterations handled (a restored trial's reports count as seen)
    received: int = 0  # reports heard from its current run
    run_key: str | None = None  # function trial: the key of its run on a worker (kept while that run is parked)
    future: Any = None  # function trial: the task running it now
    outcome: tuple[dict[str, Any], float] | None = None  # what its ended task said, and when (reports may lag)
    parked_on: str | None = None  # paused function trial: the worker its run waits on
    thread: TrainerTrial | None = None  # Trainer trial: the thread running it now
    pausing: bool = False  # Trainer trial asked to pause (its run stops; it resumes from its checkpoint)


class TuneDriver:
    """Carries out the controller's actions on the cluster and feeds it events (see the module docstring)."""

    def __init__(self, tuner: Tuner, controller: TuneController, recorder: ExperimentRecorder, client: Any) -> None:
        self.tuner, self.controller, self.recorder, self.client = tuner, controller, recorder, client
        self.path = tuner.path
        self.events: queue.Queue[TopicMessage | ControlRequest | TrainerReport | TrainerEnded] = queue.Queue()
        self.topic = f"airflowless-tune-{uuid.uuid4().hex[:12]}"
        self.numbers = itertools.count()  # task and run keys: the topic's random part and a number
        # sent with every function trial's task and saved with every state: pickled once (after
        # put_objects, so a with_parameters trainable's objects stay on the cluster)
        self.trainable = PickledOnce(tuner.trainable)
        self.sealed = self.trainable.sealed()  # as tasks carry it: opened on the workers, not on the scheduler
        self.ended: dict[str, PickledOnce] = {}  # trials that ended for good, pickled once for every later save
        self.key = current_key()  # signs every saved state
        self.outcomes: dict[str, dict[str, Any]] = {}  # task key -> what its run said on the topic
        self.ending: list[Any] = []  # tasks whose outcome was heard, kept until they end on the cluster
        self.starting: list[tuple[str, tuple[Any, ...]]] = []  # function trials to submit this turn: (id, args)
        self.releases: list[Any] = []  # tasks letting paused runs go
        self.live: dict[str, _TrialRun] = {  # a restored experiment's reports count as seen
            t.trial_id: _TrialRun(seen={int(r.get("training_iteration", 0)) for r in t.results})
            for t in controller.trials.values()}
        needs_stop = self.controller.scheduler.needs_results_promptly or bool(self.controller.stoppers)
        self.stop_events = needs_stop
        self.callbacks = CallbackList(tuner.run_config.callbacks, controller.trials)  # RunConfig(callbacks=...)

    def _show(self, force: bool = False) -> None:
        if self.table.where is None:  # nowhere to show it
            return
        trials = list(self.controller.trials.values())
        metric = self.tuner.tune_config.metric
        rows = [[t.trial_id, t.status.value, _flat_config(t.config), t.iteration,
                 t.last_result.get(metric, "") if metric else ""] for t in trials]
        self.table.update(rows, force=force)

    def run(self) -> None:
        from ..progress import LiveTable

        metric = self.tuner.tune_config.metric or "metric"
        self.table = LiveTable(f"{self.tuner.name}", ["trial", "status", "config", "iter", metric])
        control = contextlib.ExitStack()  # the trials' reports, and stop requests from the control plane
        reports = Subscription(self.client, self.topic, lambda message: self.events.put(TopicMessage(message)),
                               owned=True)  # closed: the scheduler forgets the experiment's reports
        control.enter_context(reports)
        if self.recorder.experiment_id is not None:
            from ..control.actions import experiment_topic, listen

            control.enter_context(listen(self.client, experiment_topic(self.recorder.experiment_id),
                                         lambda message: self.events.put(ControlRequest(message))))
        last_save = 0.0
        saved_trials = -1
        self.callbacks.setup(stop=self.tuner.run_config.stop, num_samples=self.tuner.tune_config.num_samples,
                             total_num_samples=None, experiment_name=self.tuner.name,
                             experiment_path=self.tuner.path)
        try:
            while True:
                self.callbacks.step_begin()
                actions = self.controller.handle(Tick())
                for action in actions:
                    if isinstance(action, Start):
                        self._start(action)
                    elif isinstance(action, Resume):
                        self._resume(action.trial.trial_id)
                    else:
                        self._stop(action.trial.trial_id)
                self._submit_starting()  # the trials go first; what they report is heard after this
                started = [a.trial for a in actions if isinstance(a, Start)]
                # one transaction: what was heard, and the records of the trials just started
                self.recorder.trials_starting(started)
                for trial in started:
                    self.callbacks.trial_started(trial)
                if len(self.controller.trials) != saved_trials:
                    # new trials are in the state before any report of theirs is recorded (see _save)
                    self._save()
                    last_save, saved_trials = time.monotonic(), len(self.controller.trials)
                self._drain(timeout=0.05)
                self._check_cluster()
                self._finish_ended_tasks()
                self.recorder.flush_if_due()
                if time.monotonic() - last_save > 2.0:
                    self._save()
                    last_save = time.monotonic()
                self._show()
                self.callbacks.step_end()
                if self.controller.done:
                    break
        except ClusterLostError:
            self._save()  # the running trials stay running in the state: restore resumes them from checkpoints
            raise
        except BaseException:
            self._save()
            for trial_id in [tid for tid, run in self.live.items()
                             if run.future is not None or run.parked_on is not None]:
                self._stop(trial_id)
            raise
        finally:
            control.close()
            self._show(force=True)
            self.table.close()
            with contextlib.suppress(Exception):
                self.client.gather(self.releases, errors="skip")
        self.recorder.flush()
        self.recorder.finish(self.controller.trials, stopped=self.controller.stop_requested)
        self._save()
        self.callbacks.experiment_end()

    def _check_cluster(self) -> None:
        """Raise :class:`ClusterLostError` once the client has lost its scheduler.

        A task lost with the scheduler ends with no exception of its own: read as
        a trial's failure it was recorded ``errored`` with ``NoneType: None`` and
        ``fit()`` returned as if the experiment had finished. Checked before the
        ended tasks are read (the client marks its state before its futures).
        """
        if self.client.status in ("running", "newly-created"):
            return
        unfinished = sorted(t.trial_id for t in self.controller.trials.values() if t.status == TrialStatus.RUNNING)
        self.recorder.interrupted(unfinished)
        raise ClusterLostError(0, str(getattr(self.client.scheduler, "address", "?")), unfinished,
                               experiment=self.tuner.name, path=self.path)

    def _save(self) -> None:
        """Save the experiment's state, the store's record first: the state never knows more than the store.

        A turn submits its new trials, creates their records, then saves the state: their reports
        are recorded by later flushes, so a record the saved state does not know (its driver was
        killed in between) holds no report; the restored searcher suggests that trial again under
        the same name, and it runs with that record (see ``ExperimentRecords.add_trials``): its config
        and status are set in the transaction of that turn.
        """
        self.recorder.flush()
        self.tuner._save_state(self.controller, self.recorder.experiment_id, self.trainable, ended=self.ended,
                               key=self.key)

    def _run_of(self, trial_id: str) -> _TrialRun:
        return self.live.setdefault(trial_id, _TrialRun())

    def _start(self, action: Start) -> None:
        trial = action.trial
        storage_dir = f"{self.path}/{trial.trial_id}"
        trial.path = storage_dir  # (the record and the callbacks hear of the start once it is submitted)
        start_iteration = action.iteration  # a restarted trial numbers its reports on from its checkpoint
        run = self._run_of(trial.trial_id)
        run.received, run.pausing = 0, False  # (a pause asked of its last run that ended in an error is over)
        run.seen = {it for it in run.seen if it <= start_iteration}
        if isinstance(self.tuner.trainable, BaseTrainer):
            run.thread = TrainerTrial(self.tuner.trainable, trial.config, trial.trial_id, storage_dir,
                                      action.checkpoint, start_iteration, self.events, decides=self.stop_events)
            run.thread.start()
            return
        stop_name = f"{self.topic}-{trial.trial_id}-decisions" if self.stop_events else None
        if run.parked_on is not None:  # restarted from a checkpoint: its paused run is not needed
            self._release(trial.trial_id)
        run_key = run.run_key = f"{self.topic}-{trial.trial_id}-{next(self.numbers)}"
        self.starting.append((trial.trial_id, (self.sealed, trial.config, trial.trial_id, self.topic, storage_dir,
                                               action.checkpoint, stop_name, start_iteration, run_key)))

    def _submit_starting(self) -> None:
        """The function trials started this turn go to the scheduler together, as one graph."""
        if not self.starting:
            return
        starting, self.starting = self.starting, []
        trainable = self.tuner.trainable
        task: Any = run_function_trial
        inputs: list[Any] = []
        if isinstance(trainable, ParameterizedTrainable):  # its objects are inputs: Dask moves them, once a worker
            task, inputs = run_parameterized_trial, [[trainable.put_objects(self.client)] * len(starting)]
        columns = [list(column) for column in zip(*(args for _, args in starting), strict=True)]
        futures = self.client.map(task, *inputs, *columns, key=[self._task_key(tid) for tid, _ in starting],
                                  resources=self._resources, pure=False, retries=0)
        for (trial_id, _), future in zip(starting, futures, strict=True):
            self._watch(trial_id, future)

    @property
    def _resources(self) -> dict[str, float]:
        return self.tuner._trial_resources()

    def _task_key(self, trial_id: str, kind: str = "") -> str:
        return f"trial-{trial_id}{kind}-{self.topic.rsplit('-', 1)[-1]}-{next(self.numbers)}"

    def _watch(self, trial_id: str, future: Any) -> None:
        """The trial's task: it ends when its outcome comes on the topic (see :meth:`_finish_ended_tasks`).

        Its record moves last: trials whose tasks end in one turn are settled in the order their tasks began.
        """
        run = self.live.pop(trial_id, None) or _TrialRun()
        self.live[trial_id] = run
        run.future = future

    def _resume(self, trial_id: str) -> None:
        """A paused function trial goes on in memory: a task on its worker wakes its run."""
        trial = self.controller.trials[trial_id]
        self.recorder.trial_started(trial)
        self.callbacks.trial_started(trial)
        run = self._run_of(trial_id)
        assert run.parked_on is not None and run.run_key is not None, f"trial {trial_id} is not parked"
        worker, run.parked_on = run.parked_on, None
        # placed on the run's worker while it lives; elsewhere it finds nothing and the trial restarts
        future = self.client.submit(resume_function_trial, run.run_key, workers=[worker],
                                    allow_other_workers=True, resources=self._resources, pure=False, retries=0,
                                    key=self._task_key(trial_id, "-resume"))
        self._watch(trial_id, future)

    def _release(self, trial_id: str) -> None:
        run = self._run_of(trial_id)
        worker, run.parked_on = run.parked_on, None
        self.releases.append(self.client.submit(release_function_trial, run.run_key, workers=[worker],
                                                allow_other_workers=False, pure=False, retries=0))

    def _stop(self, trial_id: str) -> None:
        run = self._run_of(trial_id)
        if run.parked_on is not None:
            self._release(trial_id)
        if run.thread is not None:
            run.thread.stop_requested.set()
        elif self.stop_events and run.future is not None:
            self._decide(trial_id, "STOP")
        trial = self.controller.trials[trial_id]
        if trial.finished:  # a paused trial ended without running again
            self._ended(trial)

    def _pause(self, trial_id: str) -> None:
        run = self._run_of(trial_id)
        if run.thread is not None:  # a Trainer trial stops and later restarts from its checkpoint
            run.pausing = True
            run.thread.stop_requested.set()
        elif run.future is not None:  # a function trial's run waits in memory on its worker
            self._decide(trial_id, "PAUSE")

    def _decide(self, trial_id: str, decision: str) -> None:
        from distributed import Queue

        Queue(f"{self.topic}-{trial_id}-decisions", client=self.client).put(decision)

    def _drain(self, timeout: float) -> None:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(item)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, item: TopicMessage | ControlRequest | TrainerReport | TrainerEnded) -> None:
        if isinstance(item, TopicMessage):  # a function trial's reports, and its task's outcome once it ended or paused
            message = item.message
            trial_id = message["trial"]
            for report in message.get("reports", ()):
                self._run_of(trial_id).received += 1
                self._result(trial_id, {**report["metrics"], "training_iteration": report["step"],
                                        "checkpoint_uri": report.get("checkpoint"), "_reported_at": report.get("time"),
                                        "_this_iter_s": report.get("this_iter_s")})
            if message.get("event") == "outcome":
                self.outcomes[message["task"]] = message
            elif message.get("event") == "started" and trial_id in self.controller.trials:
                self.recorder.trial_running(self.controller.trials[trial_id])
        elif isinstance(item, TrainerReport):
            try:
                self._result(item.trial_id, item.result)
            finally:
                if item.handled is not None:
                    item.handled.set()  # a Trainer trial waiting for the decision on this report goes on
        elif isinstance(item, TrainerEnded) and item.error is None:
            trial_id = item.trial_id
            run = self._run_of(trial_id)
            run.thread = None
            if run.pausing:
                run.pausing = False
                self._paused(trial_id, worker=None)
                return
            self.controller.handle(Completed(trial_id))
            self._ended(self.controller.trials[trial_id])
        elif isinstance(item, TrainerEnded):
            self._run_of(item.trial_id).thread = None
            self._error(item.trial_id, item.error or "")
        else:
            self._control(item.message)

    def _control(self, message: dict[str, Any]) -> None:
        """A control-plane request: the controller stops one trial or all, as a scheduler's STOP does."""
        if message.get("action") == "stop":
            actions = self.controller.handle(StopRequested())
        elif message.get("action") == "stop_trial":
            actions = self.controller.handle(StopRequested(str(message.get("trial"))))
        else:
            return
        for action in actions:
            trial_id = action.trial.trial_id
            self._stop(trial_id)
            run = self._run_of(trial_id)
            if run.future is not None and run.run_key is not None and not self.stop_events:
                # a function trial that waits for no decision stops at its next report
                with contextlib.suppress(Exception):
                    self.client.run(stop_function_trial, run.run_key)

    def _auto_filled(self, trial_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` with Ray's auto-filled fields (:data:`..store.records.AUTO_FILLED`) after the trial's own metrics."""
        at = float(result.pop("_reported_at", None) or time.time())
        this_iter = float(result.pop("_this_iter_s", None) or 0.0)
        trial = self.controller.trials.get(trial_id)
        before = trial.last_result.get("time_total_s", 0.0) if trial is not None else 0.0
        auto = {"trial_id": trial_id, "time_this_iter_s": this_iter,
                "time_total_s": (before if isinstance(before, (int, float)) else 0.0) + this_iter,
                "timestamp": int(at), "date": dt.datetime.fromtimestamp(at).strftime("%Y-%m-%d_%H-%M-%S")}
        return {**result, **{key: value for key, value in auto.items() if key not in result}}

    def _result(self, trial_id: str, result: dict[str, Any]) -> None:
        result = self._auto_filled(trial_id, result)
        iteration, run = int(result.get("training_iteration", 0)), self._run_of(trial_id)
        if iteration in run.seen:  # replayed by a trial restarted from an earlier checkpoint: kept once
            if self.stop_events and run.future is not None and not run.future.done():
                self._decide(trial_id, "CONTINUE")  # its task still waits for an answer
            return
        run.seen.add(iteration)
        if not self.controller.accepts(trial_id):  # sent after its stop: not part of the trial
            return
        stopped = False
        for action in self.controller.handle(Reported(trial_id, result)):
            if isinstance(action, Pause):
                self._pause(action.trial.trial_id)
            else:
                self._stop(action.trial.trial_id)
            stopped = stopped or action.trial.trial_id == trial_id
        if self.stop_events and run.future is not None and not stopped:
            self._decide(trial_id, "CONTINUE")  # the function trial waits for an answer to each report
        self.recorder.result(self.controller.trials[trial_id], result)
        self.callbacks.result(self.controller.trials[trial_id], result)

    def _paused(self, trial_id: str, worker: str | None) -> None:
        """A paused trial's run stopped: parked on ``worker``, or gone (it resumes from its checkpoint)."""
        run = self._run_of(trial_id)
        if worker is not None:
            run.parked_on = worker
        self.controller.handle(RunPaused(trial_id, in_memory=worker is not None))
        trial = self.controller.trials[trial_id]
        if trial.finished and run.parked_on is not None:  # stopped while it paused: its parked run goes
            self._release(trial_id)
        if trial.finished:
            self._ended(trial)
        elif trial.trial_id in self.controller.resumable:
            self.recorder.trial_paused(trial)

    def _error(self, trial_id: str, error: str) -> None:
        self._check_cluster()  # a trial lost with the cluster did not fail: it was interrupted
        self.controller.handle(Failed(trial_id, error))
        trial = self.controller.trials[trial_id]
        if trial.finished:
            self._ended(trial)
        else:
            self.recorder.trial_restarted(trial)
            self.callbacks.trial_restarted(trial)

    def _ended(self, trial: Any) -> None:
        """A trial ended for good: the record and the callbacks hear it."""
        self.recorder.trial_ended(trial, stopped=trial.trial_id in self.controller.stopped)
        self.callbacks.trial_ended(trial)

    def _finish_ended_tasks(self) -> None:
        """Settle the function trials whose task ended or parked, by the outcome their run sent.

        One path: a run sends its reports, then its outcome (the task's return value), on the
        Tuner's topic; the scheduler passes them on in that order, before it says the task
        finished, so the outcome settles the trial without a round trip to its worker. The
        future is looked at only for what sends no outcome: a task that raised (the
        function's error, or a paused run lost with its worker) or was lost. A finished task
        whose outcome never came (a lost message: a client that reconnected lost its
        subscription) has its result, the same outcome, fetched instead. Reports missing
        after the outcome (lost too) are read from the topic's history after a while.
        """
        self.ending = [future for future in self.ending if future.status == "pending"]
        running = [(tid, run) for tid, run in self.live.items() if run.future is not None]
        if any(run.future.status != "pending" and run.future.key not in self.outcomes and run.outcome is None
               for _, run in running):
            self._drain(timeout=0)  # what those tasks sent before they ended is queued by now
        now = time.monotonic()
        for _, run in running:
            if run.outcome is not None or run.future is None:
                continue
            said = self.outcomes.pop(run.future.key, None)
            if said is None and run.future.status == "pending":
                continue
            if said is None:
                said = run.future.result() if run.future.status == "finished" else {"failed": True}
            run.outcome = (said, now)
        for trial_id, run in running:
            if run.outcome is None or run.future is None:
                continue
            (said, ended), future = run.outcome, run.future
            if said.get("failed"):
                run.outcome = run.future = None
                try:
                    exception = future.exception()
                    error = f"{type(exception).__name__}: {exception}"
                except BaseException as exc:
                    exception, error = exc, f"{type(exc).__name__}"
                if isinstance(exception, ParkedTrialLost):  # its worker left while it was paused
                    self.controller.handle(ParkLost(trial_id))
                    self.recorder.trial_restarted(self.controller.trials[trial_id])
                else:
                    self._error(trial_id, error)
                continue
            sent = int(said["sent"])
            if run.received < sent and time.monotonic() - ended < 5.0:
                continue
            if run.received < sent:  # late: read the topic's history (reports seen are kept once)
                for _, message in self.client.get_events(self.topic):
                    if message.get("trial") == trial_id:
                        self._handle(TopicMessage({k: v for k, v in message.items() if k != "event"}))
            run.outcome = run.future = None
            self.ending.append(future)
            if said.get("parked"):
                self._paused(trial_id, worker=said["worker"])
                continue
            self.controller.handle(Completed(trial_id))
            self._ended(self.controller.trials[trial_id])


def _flat_config(config: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for key, value in config.items():
        if isinstance(value, dict):
            parts.append(_flat_config(value, f"{prefix}{key}."))
        else:
            parts.append(f"{prefix}{key}={value:.4g}" if isinstance(value, float) else f"{prefix}{key}={value}")
    return ", ".join(p for p in parts if p)
