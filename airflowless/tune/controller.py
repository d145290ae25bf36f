"""The Tune controller's core: events in, actions out, no I/O.

The adapter (``_Loop`` in :mod:`.tuner`) feeds it what happened — a trial reported, ended,
failed — and carries out what it returns: start a trial (maybe from a
checkpoint), stop one. Everything the experiment knows lives here, so it can be
saved and restored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .schedulers.base import Decision, FIFOScheduler, TrialScheduler, TrialView
from .search.searcher import FINISHED, Searcher
from .trial import Trial, TrialStatus

__all__ = ["Start", "Stop", "TuneController"]


@dataclass(frozen=True)
class Start:
    """Run ``trial``; from ``checkpoint`` if given, its reports numbered on from ``iteration``."""

    trial: Trial
    checkpoint: str | None = None
    iteration: int = 0


@dataclass(frozen=True)
class Stop:
    trial: Trial


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

    @staticmethod
    def _view(trial: Trial) -> TrialView:
        return TrialView(trial.trial_id, trial.config, trial.iteration)

    @property
    def running(self) -> list[Trial]:
        return [t for t in self.trials.values() if t.status == TrialStatus.RUNNING]

    @property
    def done(self) -> bool:
        return self.search_finished and all(t.finished for t in self.trials.values())

    def next_actions(self) -> list[Start]:
        """Start pending trials (restored ones first), then new ones while there is room."""
        actions: list[Start] = []
        for trial in self.trials.values():
            if len(self.running) >= self.max_concurrent:
                return actions
            if trial.status == TrialStatus.PENDING:
                trial.status = TrialStatus.RUNNING
                start = trial.checkpoint_iteration if trial.checkpoint else 0
                # reports after the checkpoint are superseded by the ones the restarted run sends
                trial.results = [r for r in trial.results if int(r.get("training_iteration", 0)) <= start]
                actions.append(Start(trial, trial.checkpoint, start))
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

    def on_result(self, trial_id: str, result: dict[str, Any]) -> list[Stop]:
        trial = self.trials[trial_id]
        if trial.finished:
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
            trial.status = TrialStatus.PAUSED  # restarted by on_complete once its run has stopped
            return [Stop(trial)]
        return []

    def on_complete(self, trial_id: str) -> None:
        trial = self.trials[trial_id]
        if trial.finished:
            return
        if trial.status == TrialStatus.PAUSED:
            exploit = getattr(self.scheduler, "exploit_for", lambda _tid: None)(trial_id)
            if exploit is not None:  # PBT: continue from a better trial's checkpoint, with a new config
                trial.config, trial.checkpoint, trial.checkpoint_iteration = exploit
                trial.status = TrialStatus.PENDING
                return
        trial.status = TrialStatus.TERMINATED
        self.searcher.on_trial_complete(trial_id, trial.last_result or None)
        self.scheduler.on_trial_complete(self._view(trial), trial.last_result or None)

    def on_error(self, trial_id: str, error: str) -> None:
        trial = self.trials[trial_id]
        if trial.finished:
            return
        if trial.restarts < self.max_failures:
            trial.restarts += 1
            trial.status = TrialStatus.PENDING  # started again from its checkpoint by next_actions
            return
        trial.status = TrialStatus.ERRORED
        trial.error = error
        self.searcher.on_trial_complete(trial_id, trial.last_result or None, error=True)
        self.scheduler.on_trial_remove(self._view(trial))

    def get_state(self) -> dict[str, Any]:
        return {"trials": self.trials, "counter": self._counter, "search_finished": self.search_finished,
                "searcher": self.searcher.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.trials = state["trials"]
        self._counter = state["counter"]
        self.search_finished = state["search_finished"]
        self.searcher.set_state(state["searcher"])
        for trial in self.trials.values():
            self.scheduler.on_trial_add(self._view(trial))
            if trial.status in (TrialStatus.RUNNING, TrialStatus.PAUSED):
                trial.status = TrialStatus.PENDING  # interrupted: run again from its checkpoint
