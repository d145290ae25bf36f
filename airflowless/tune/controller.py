"""The Tune controller's core: events in, actions out, no I/O.

The driver (:mod:`.driver`) feeds :meth:`TuneController.handle` what happened —
there may be room for trials (:class:`Tick`), a trial reported, ended, failed,
paused, a stop was asked for — and carries out the actions it returns: start a
trial (maybe from a checkpoint), stop one, pause one, resume one. Everything the
experiment knows lives here, so it can be saved and restored, and its rules are
tested without a cluster (``tests/tune/test_controller.py``).

>>> from airflowless.tune.search.searcher import BasicVariantGenerator
>>> from airflowless.tune.schedulers import ASHAScheduler
>>> searcher = BasicVariantGenerator()
>>> searcher.set_search_properties("loss", "min", {"lr": 0.1}, num_samples=3, seed=0)
>>> scheduler = ASHAScheduler(metric="loss", mode="min", grace_period=1, max_t=4)
>>> controller = TuneController(searcher=searcher, scheduler=scheduler, max_concurrent=2)
>>> def show(actions): return [f"{type(a).__name__} {a.trial.trial_id}" for a in actions]
>>> show(controller.handle(Tick()))                                  # room for two trials
['Start trial_00000', 'Start trial_00001']
>>> show(controller.handle(Reported("trial_00000", {"loss": 0.2, "training_iteration": 1})))
[]
>>> show(controller.handle(Reported("trial_00001", {"loss": 0.9, "training_iteration": 1})))  # worse: cut
['Stop trial_00001']
>>> show(controller.handle(Completed("trial_00001")) + controller.handle(Tick()))
['Start trial_00002']

A paused trial (a scheduler's PAUSE) goes through three steps: ``Pause`` asks
the driver to stop its run for now; the driver says ``on_paused`` once the
run has stopped, and whether the trial waits in memory (a function trial
parked on its worker) or must restart from its checkpoint; then, when there is
room, the scheduler's ``choose_trial_to_resume`` may send it on (``Resume``, or
``Start`` from its checkpoint). Paused trials nobody resumes end when nothing
else can run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .schedulers.base import Decision, FIFOScheduler, TrialScheduler, TrialView
from .search.searcher import FINISHED, Searcher
from .trial import Trial, TrialStatus

__all__ = ["Start", "Stop", "Pause", "Resume", "Action", "Tick", "Reported", "RunPaused", "ParkLost", "Completed",
           "Failed", "StopRequested", "Event", "TuneController"]


@dataclass(frozen=True)
class Start:
    """Run ``trial``; from ``checkpoint`` if given, its reports numbered on from ``iteration``."""

    trial: Trial
    checkpoint: str | None = None
    iteration: int = 0


@dataclass(frozen=True)
class Stop:
    """End ``trial``'s run (or let a trial waiting in memory go)."""

    trial: Trial


@dataclass(frozen=True)
class Pause:
    """Stop ``trial``'s run for now; it may be resumed (a function trial waits in memory)."""

    trial: Trial


@dataclass(frozen=True)
class Resume:
    """Go on with a trial waiting in memory, from the report where it paused."""

    trial: Trial


Action = Start | Stop | Pause | Resume


@dataclass(frozen=True)
class Tick:
    """The driver's turn: there may be room to restart, resume or start trials."""


@dataclass(frozen=True)
class Reported:
    """Trial ``trial_id`` reported ``result`` (its metrics, ``training_iteration``, ``checkpoint_uri``)."""

    trial_id: str
    result: dict[str, Any]


@dataclass(frozen=True)
class RunPaused:
    """A paused trial's run has stopped: it waits in memory on its worker, or restarts from its checkpoint."""

    trial_id: str
    in_memory: bool


@dataclass(frozen=True)
class ParkLost:
    """A trial resumed in memory was not there any more (its worker left): it restarts from its checkpoint."""

    trial_id: str


@dataclass(frozen=True)
class Completed:
    """Trial ``trial_id``'s run returned."""

    trial_id: str


@dataclass(frozen=True)
class Failed:
    """Trial ``trial_id``'s run raised ``error`` (or was lost with its worker)."""

    trial_id: str
    error: str


@dataclass(frozen=True)
class StopRequested:
    """Stop one trial from outside (the control plane), or the whole experiment when ``trial_id`` is None."""

    trial_id: str | None = None


Event = Tick | Reported | RunPaused | ParkLost | Completed | Failed | StopRequested


class TuneController:
    def __init__(self, *, searcher: Searcher, scheduler: TrialScheduler | None = None, stoppers: Sequence[Any] = (),
                 max_concurrent: int, max_failures: int = 0) -> None:
        self.searcher = searcher
        self.scheduler = scheduler or FIFOScheduler()
        self.stoppers = list(stoppers)
        self.max_concurrent = max_concurrent
        self.max_failures = max_failures
        self.trials: dict[str, Trial] = {}
        self.search_finished = False
        self._counter = 0
        self.resumable: dict[str, bool] = {}  # paused trials whose runs stopped -> waiting in memory?
        self._exploits: dict[str, tuple[dict[str, Any], str, int]] = {}  # PBT: paused -> (config, ckpt, it)
        self.stopped: set[str] = set()  # trials stopped from outside (a control-plane request)
        self.stop_requested = False  # the whole experiment was stopped from outside

    def handle(self, event: Event) -> list[Action]:
        """What to do after ``event``: the one way in for the driver (the methods below are its steps)."""
        if isinstance(event, Tick):
            return list(self.next_actions())
        if isinstance(event, Reported):
            return list(self.on_result(event.trial_id, event.result))
        if isinstance(event, StopRequested):
            if event.trial_id is None:
                return list(self.stop_experiment())
            return list(self.stop_trial(event.trial_id)) if event.trial_id in self.trials else []
        if isinstance(event, RunPaused):
            self.on_paused(event.trial_id, in_memory=event.in_memory)
        elif isinstance(event, ParkLost):
            self.on_park_lost(event.trial_id)
        elif isinstance(event, Completed):
            self.on_complete(event.trial_id)
        elif isinstance(event, Failed):
            self.on_error(event.trial_id, event.error)
        else:
            raise UsageError(f"not a Tune controller event: {event!r}")
        return []

    @staticmethod
    def _view(trial: Trial) -> TrialView:
        return TrialView(trial.trial_id, trial.config, trial.iteration)

    @property
    def running(self) -> list[Trial]:
        return [t for t in self.trials.values() if t.status == TrialStatus.RUNNING]

    @property
    def done(self) -> bool:
        return self.search_finished and all(t.finished for t in self.trials.values())

    def next_actions(self) -> list[Start | Resume | Stop]:
        """Restart pending trials, resume paused ones the scheduler promotes, then start new ones.

        Once nothing can start and nothing runs, paused trials the scheduler does not
        resume end for good.
        """
        actions: list[Start | Resume | Stop] = [*self._restart_pending(), *self._resume(idle=False),
                                                *self._start_new()]
        if self._idle:
            actions += self._resume(idle=True)
            if self._idle:
                actions += self._end_paused()
        return actions

    @property
    def _idle(self) -> bool:
        return (self.search_finished and not self.running
                and all(t.finished or t.trial_id in self.resumable for t in self.trials.values()))

    def _restart_pending(self) -> list[Start | Resume | Stop]:
        actions: list[Start | Resume | Stop] = []
        room = self.max_concurrent - len(self.running)
        for trial in self.trials.values():
            if len(actions) >= room:
                break
            if trial.status == TrialStatus.PENDING:
                trial.status = TrialStatus.RUNNING
                start = trial.checkpoint_iteration if trial.checkpoint else 0
                # reports after the checkpoint are superseded by the ones the restarted run sends
                trial.results = [r for r in trial.results if int(r.get("training_iteration", 0)) <= start]
                actions.append(Start(trial, trial.checkpoint, start))
        return actions

    def _resume(self, *, idle: bool) -> list[Start | Resume | Stop]:
        actions: list[Start | Resume | Stop] = []
        while self.resumable and len(self.running) < self.max_concurrent:
            paused = [self._view(self.trials[tid]) for tid in self.resumable]
            trial_id = self.scheduler.choose_trial_to_resume(paused, idle=idle)
            if trial_id is None:
                break
            trial = self.trials[trial_id]
            if self.resumable.pop(trial_id):
                trial.status = TrialStatus.RUNNING
                actions.append(Resume(trial))
            else:  # its run is gone: from its checkpoint
                trial.status = TrialStatus.PENDING
                actions += self._restart_pending()
            idle = False  # it runs now
        return actions

    def _start_new(self) -> list[Start | Resume | Stop]:
        actions: list[Start | Resume | Stop] = []
        while not self.search_finished and len(self.running) < self.max_concurrent:
            trial_id = f"trial_{self._counter:05d}"
            config = self.searcher.suggest(trial_id)
            if config == FINISHED:
                self.search_finished = True
                break
            if config is None:
                break
            assert isinstance(config, dict)
            self._counter += 1
            trial = Trial(trial_id, config, TrialStatus.RUNNING)
            self.trials[trial_id] = trial
            self.scheduler.on_trial_add(self._view(trial))
            actions.append(Start(trial))
        return actions

    def _end_paused(self) -> list[Start | Resume | Stop]:
        actions: list[Start | Resume | Stop] = []
        for trial_id in list(self.resumable):
            del self.resumable[trial_id]
            trial = self.trials[trial_id]
            trial.stopped_early = True
            self._terminate(trial)
            actions.append(Stop(trial))  # lets a run waiting in memory go, and records the end
        return actions

    def stop_trial(self, trial_id: str) -> list[Stop]:
        """Stop a trial from outside (the control plane), as a scheduler's STOP does; nothing once it ended.

        A running trial gets ``Stop`` and ends when its run does; a pending or
        paused one ends now (a paused run still pausing ends in :meth:`on_paused`).
        """
        trial = self.trials.get(trial_id)
        if trial is None or trial.finished:
            return []
        self.stopped.add(trial_id)
        trial.stopped_early = True
        self._exploits.pop(trial_id, None)
        if trial.status == TrialStatus.RUNNING:
            return [Stop(trial)]
        if trial.status == TrialStatus.PAUSED and trial_id not in self.resumable:
            return []
        self.resumable.pop(trial_id, None)
        self._terminate(trial)
        return [Stop(trial)]

    def stop_experiment(self) -> list[Stop]:
        """Stop the experiment from outside: no new trials, and every unfinished one stopped."""
        self.stop_requested = True
        self.search_finished = True
        return [action for trial_id in list(self.trials) for action in self.stop_trial(trial_id)]

    def accepts(self, trial_id: str) -> bool:
        """Whether a report of the trial still counts: not once it ended or was told to stop
        (a report its run sent after the stop is not the trial's result)."""
        trial = self.trials[trial_id]
        return not (trial.finished or trial.stopped_early)

    def on_result(self, trial_id: str, result: dict[str, Any]) -> list[Stop | Pause]:
        trial = self.trials[trial_id]
        if not self.accepts(trial_id):
            return []
        trial.results.append(result)
        if result.get("checkpoint_uri"):
            trial.checkpoint = result["checkpoint_uri"]
            trial.checkpoint_iteration = trial.iteration
        self.searcher.on_trial_result(trial_id, result)
        decision = self.scheduler.on_trial_result(self._view(trial), result)
        if any(stopper(trial_id, result) for stopper in self.stoppers):
            decision = Decision.STOP
        if decision == Decision.STOP:
            trial.stopped_early = True
            return [Stop(trial)]
        if decision == Decision.PAUSE:
            trial.status = TrialStatus.PAUSED
            exploit = getattr(self.scheduler, "exploit_for", lambda _tid: None)(trial_id)
            if exploit is not None:  # PBT: restarted from a better trial's checkpoint once its run ends
                self._exploits[trial_id] = exploit
                return [Stop(trial)]
            return [Pause(trial)]
        return []

    def on_paused(self, trial_id: str, *, in_memory: bool) -> None:
        """A paused trial's run has stopped: it waits in memory on its worker, or will restart from its checkpoint."""
        trial = self.trials[trial_id]
        if trial.status == TrialStatus.PAUSED and trial_id in self.stopped:  # stopped while it paused
            self._terminate(trial)
        elif trial.status == TrialStatus.PAUSED:
            self.resumable[trial_id] = in_memory

    def on_park_lost(self, trial_id: str) -> None:
        """A trial resumed in memory was not there any more (its worker left): it restarts from its checkpoint."""
        trial = self.trials[trial_id]
        if trial_id in self.stopped and not trial.finished:
            self._terminate(trial)
        elif not trial.finished:
            trial.status = TrialStatus.PENDING

    def on_complete(self, trial_id: str) -> None:
        trial = self.trials[trial_id]
        if trial.finished:
            return
        exploit = self._exploits.pop(trial_id, None)
        if exploit is not None:  # PBT: continue from a better trial's checkpoint, with a new config
            trial.config, trial.checkpoint, trial.checkpoint_iteration = exploit
            trial.status = TrialStatus.PENDING
            return
        self.resumable.pop(trial_id, None)
        self._terminate(trial)

    def _terminate(self, trial: Trial) -> None:
        trial.status = TrialStatus.TERMINATED
        self.searcher.on_trial_complete(trial.trial_id, trial.last_result or None)
        self.scheduler.on_trial_complete(self._view(trial), trial.last_result or None)

    def on_error(self, trial_id: str, error: str) -> None:
        trial = self.trials[trial_id]
        if trial.finished:
            return
        self.resumable.pop(trial_id, None)
        if trial.restarts < self.max_failures and trial_id not in self.stopped:
            trial.restarts += 1
            trial.status = TrialStatus.PENDING  # started again from its checkpoint by next_actions
            return
        trial.status = TrialStatus.ERRORED
        trial.error = error
        self.searcher.on_trial_complete(trial_id, trial.last_result or None, error=True)
        self.scheduler.on_trial_remove(self._view(trial))

    def reopen(self, *, resume_unfinished: bool = True, resume_errored: bool = False,
               restart_errored: bool = False) -> tuple[list[Trial], list[Trial]]:
        """Before a restored experiment goes on (``Tuner.restore``'s options): errored trials run again, from
        their latest checkpoint (``resume_errored``) or from scratch (``restart_errored``), with their
        retries back; with ``resume_unfinished=False`` the trials that had not finished end instead.

        Returns the trials ended so and those restarted from scratch, for the record to hear."""
        ended, restarted = [], []
        for trial in self.trials.values():
            if trial.status == TrialStatus.ERRORED and (resume_errored or restart_errored):
                trial.status, trial.error, trial.restarts = TrialStatus.PENDING, None, 0
                trial.stopped_early = False  # a stop asked before it errored is not asked of its new run
                self.stopped.discard(trial.trial_id)
                if restart_errored:
                    trial.checkpoint, trial.checkpoint_iteration, trial.results = None, 0, []
                    restarted.append(trial)
            elif not trial.finished and not resume_unfinished:
                self.resumable.pop(trial.trial_id, None)
                self._exploits.pop(trial.trial_id, None)
                trial.stopped_early = True
                self._terminate(trial)
                ended.append(trial)
        return ended, restarted

    def get_state(self) -> dict[str, Any]:
        return {"trials": self.trials, "counter": self._counter, "search_finished": self.search_finished,
                "searcher": self.searcher.get_state(), "exploits": self._exploits,
                "stopped": set(self.stopped), "stop_requested": self.stop_requested}

    def set_state(self, state: dict[str, Any]) -> None:
        self.trials = state["trials"]
        self._counter = state["counter"]
        self.search_finished = state["search_finished"]
        self.searcher.set_state(state["searcher"])
        self._exploits = state.get("exploits", {})
        self.stopped = set(state.get("stopped", ()))
        self.stop_requested = bool(state.get("stop_requested", False))
        for trial in self.trials.values():
            self.scheduler.on_trial_add(self._view(trial))
            if trial.status == TrialStatus.PAUSED and trial.trial_id not in self._exploits:
                self.resumable[trial.trial_id] = False  # still paused; its run is gone: resumes from its checkpoint
            elif trial.status in (TrialStatus.RUNNING, TrialStatus.PAUSED):
                trial.status = TrialStatus.PENDING  # interrupted: run again from its checkpoint
