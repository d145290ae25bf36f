"""Tune callbacks: hooks the Tuner calls as trials start, report, checkpoint and end (Ray Tune's names).

>>> from airflowless import tune
>>> class PrintLoss(tune.Callback):
...     def on_trial_result(self, iteration, trials, trial, result, **info):
...         print(trial.trial_id, result["loss"])
>>> tune.RunConfig(callbacks=[PrintLoss()]).callbacks[0].__class__.__name__
'PrintLoss'

Call order, for each experiment (every hook does nothing unless overridden)::

    setup(stop=, num_samples=, total_num_samples=, experiment_name=, experiment_path=)
    per turn of the Tuner's loop:  on_step_begin  ...  on_step_end
      on_trial_start        a trial's run starts (again after a pause or a retry)
      on_trial_result       after the searcher and the scheduler saw the report
      on_trial_save, on_checkpoint   the report carried a checkpoint
      on_trial_recover      the trial failed and will be retried from its checkpoint
      on_trial_complete | on_trial_error    the trial ended for good
    on_experiment_end(trials)

Hooks run in the driver's Tuner loop, one at a time; an exception raised by a
hook stops the experiment (its state is saved: ``Tuner.restore`` continues it).
``trial`` is a :class:`~airflowless.tune.trial.Trial` (``trial_id``, ``config``,
``status``, ``last_result``, ``path``, ``local_path``).

:class:`LoggerCallback` narrows these to ``log_trial_start/result/save/end``.
A Trainer's ``RunConfig(callbacks=[...])`` takes the same callbacks: its fit is
seen as a one-trial experiment, as in Ray.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..train.checkpoint import Checkpoint
from .trial import Trial, TrialStatus

__all__ = ["Callback", "LoggerCallback", "CallbackList"]


class Callback:
    """Base class of Tune callbacks; subclasses override the hooks they need (all default to nothing)."""

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:
        """Called once before the first trial starts."""

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        """Called at the start of each turn of the Tuner's loop."""

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        """Called at the end of each turn of the Tuner's loop."""

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Called when a trial's run starts (also when a paused or failed trial runs again)."""

    def on_trial_restore(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Accepted for Ray compatibility; a trial restarted from its checkpoint calls ``on_trial_start``."""

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Called when a report of the trial carried a checkpoint."""

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any],
                        **info: Any) -> None:
        """Called for each report the trial sent, after the searcher and the scheduler saw it."""

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Called when a trial ended without error (finished, or stopped by a scheduler or stopper)."""

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Called when a trial failed and will run again from its checkpoint (``TuneConfig.max_failures``)."""

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Called when a trial failed for good (``trial.error`` says how)."""

    def on_checkpoint(self, iteration: int, trials: list[Trial], trial: Trial, checkpoint: Checkpoint,
                      **info: Any) -> None:
        """Called with the checkpoint a report of the trial carried."""

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        """Called once after every trial ended."""

    # -- a Trainer's fit, seen as a one-trial experiment (RunConfig(callbacks=...) of a Trainer) -------
    def on_start(self, name: str, config: dict[str, Any], path: str) -> None:
        """A Trainer's fit started: ``setup`` and ``on_trial_start`` for a trial named after the run."""
        trial = Trial(name, config, TrialStatus.RUNNING, path=path)
        self._fits()[threading.get_ident()] = trial
        self.setup(num_samples=1, total_num_samples=1, experiment_name=name, experiment_path=path)
        self.on_trial_start(0, [trial], trial)

    def on_report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        """A Trainer's fit reported: ``on_trial_result``, and ``on_trial_save``/``on_checkpoint`` with a checkpoint."""
        trial = self._fits().get(threading.get_ident())
        if trial is None:
            return
        trial.results.append(dict(metrics))
        step = int(metrics.get("training_iteration", len(trial.results)))
        self.on_trial_result(step, [trial], trial, dict(metrics))
        if checkpoint is not None:
            trial.checkpoint, trial.checkpoint_iteration = checkpoint.path, step
            self.on_trial_save(step, [trial], trial)
            self.on_checkpoint(step, [trial], trial, checkpoint)

    def _fits(self) -> dict[int, Trial]:
        """The fits going on, by the thread that runs each: a Tuner of Trainers runs its trials' fits in threads
        of one process, and their copies of the Trainer share its ``RunConfig(callbacks=...)``."""
        return self.__dict__.setdefault("_fit_trials", {})  # type: ignore[no-any-return]

    def on_end(self, result: Any) -> None:
        """A Trainer's fit ended: ``on_trial_complete`` or ``on_trial_error``, then ``on_experiment_end``."""
        trial = self._fits().pop(threading.get_ident(), None)
        if trial is None:
            return
        if result.error is None:
            trial.status = TrialStatus.TERMINATED
            self.on_trial_complete(trial.iteration, [trial], trial)
        else:
            trial.status, trial.error = TrialStatus.ERRORED, str(result.error).splitlines()[0]
            self.on_trial_error(trial.iteration, [trial], trial)
        self.on_experiment_end([trial])


class LoggerCallback(Callback):
    """A callback that logs trials: override ``log_trial_start/result/save/end`` (Ray's ``LoggerCallback``).

    >>> class Printer(LoggerCallback):
    ...     def log_trial_result(self, iteration, trial, result):
    ...         print(trial.trial_id, result)
    """

    def log_trial_start(self, trial: Trial) -> None:
        """A trial's run started."""

    def log_trial_restore(self, trial: Trial) -> None:
        """Accepted for Ray compatibility (never called: a restarted trial starts again)."""

    def log_trial_save(self, trial: Trial) -> None:
        """A report of the trial carried a checkpoint (``trial.checkpoint``)."""

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        """The trial reported ``result``."""

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        """The trial ended; ``failed`` when it errored."""

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_start(trial)

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_save(trial)

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any],
                        **info: Any) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_end(trial, failed=True)


class CallbackList:
    """The Tuner's side: calls each callback's hooks with the loop's iteration and all trials.

    Callbacks need not subclass :class:`Callback` (Ray callbacks port as they
    are): a hook a callback lacks is skipped.
    """

    def __init__(self, callbacks: Sequence[Any], trials: dict[str, Trial]) -> None:
        self.callbacks = list(callbacks)
        self.trials = trials  # the controller's: hooks see every trial as it is now
        self.iteration = 0
        self._ended: set[str] = set()

    def _call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(*args, **kwargs)

    def _on_trial(self, hook: str, trial: Trial, **kwargs: Any) -> None:
        if self.callbacks:
            self._call(hook, iteration=self.iteration, trials=list(self.trials.values()), trial=trial, **kwargs)

    def setup(self, **info: Any) -> None:
        self._call("setup", **info)

    def step_begin(self) -> None:
        self.iteration += 1
        if self.callbacks:
            self._call("on_step_begin", iteration=self.iteration, trials=list(self.trials.values()))

    def step_end(self) -> None:
        if self.callbacks:
            self._call("on_step_end", iteration=self.iteration, trials=list(self.trials.values()))

    def trial_started(self, trial: Trial) -> None:
        self._on_trial("on_trial_start", trial)

    def result(self, trial: Trial, result: dict[str, Any]) -> None:
        if not self.callbacks:
            return
        uri = result.get("checkpoint_uri")
        self._on_trial("on_trial_result", trial, result={k: v for k, v in result.items() if k != "checkpoint_uri"})
        if uri:
            self._on_trial("on_trial_save", trial)
            self._on_trial("on_checkpoint", trial, checkpoint=Checkpoint(uri))

    def trial_restarted(self, trial: Trial) -> None:
        self._on_trial("on_trial_recover", trial)

    def trial_ended(self, trial: Trial) -> None:
        if trial.trial_id in self._ended:  # told once, however many ways the end was noticed
            return
        self._ended.add(trial.trial_id)
        self._on_trial("on_trial_error" if trial.status == TrialStatus.ERRORED else "on_trial_complete", trial)

    def experiment_end(self) -> None:
        self._call("on_experiment_end", trials=list(self.trials.values()))
