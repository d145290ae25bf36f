"""Recording an experiment in the store as it runs: trials, every report, checkpoints (batched).

What the Tuner hears is buffered and written in one transaction: when trials
start (their records are created in the same transaction), before the
experiment's state is saved, at the end, and otherwise at most
``FLUSH_INTERVAL_S`` after it was heard.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime, timezone
from typing import Any

from .trial import Trial, TrialStatus

__all__ = ["ExperimentRecorder"]

FLUSH_INTERVAL_S = 0.2  # the longest a report waits in memory (a killed driver loses at most that)

_STATUS = {TrialStatus.PENDING: "pending", TrialStatus.RUNNING: "running", TrialStatus.PAUSED: "paused",
           TrialStatus.TERMINATED: "terminated", TrialStatus.ERRORED: "errored"}


class ExperimentRecorder:
    """Writes through a small buffer flushed in one transaction (see the module's docstring)."""

    def __init__(self, name: str, path: str, tune_config: Any, param_space: dict[str, Any]) -> None:
        from ..store import open_store

        self.store = open_store()
        self.name, self.path = name, path
        self.tune_config, self.param_space = tune_config, param_space
        self.experiment_id: int | None = None
        self._metrics: list[tuple[int, int, dict[str, Any]]] = []
        self._updates: dict[int, dict[str, Any]] = {}
        self._checkpoints: list[tuple[int, int, str, dict[str, Any]]] = []
        self._running: set[int | None] = set()  # records of trials known to run on a worker now
        self._flushed_at = time.monotonic()

    def create(self) -> None:
        from ..dag.interrupt import current_stage

        self.experiment_id = self.store.create_experiment(
            self.name, kind="tune", config={"param_space": repr(self.param_space),
                                            "num_samples": self.tune_config.num_samples},
            storage_path=self.path, metric=self.tune_config.metric, mode=self.tune_config.mode,
            started_by=current_stage())

    def attach(self, experiment_id: int, trials: dict[str, Trial]) -> dict[str, dict[str, Any]]:
        """Continue a restored experiment; what the store has beyond the saved state is taken back:
        reports, the latest checkpoint, restarts. Returns the records of trials that ended meanwhile."""
        self.experiment_id = experiment_id
        self.store.set_experiment_status(experiment_id, "running")
        ended: dict[str, dict[str, Any]] = {}
        for record in self.store.list_trials(experiment_id):
            trial = trials.get(record["name"])
            if trial is None:
                continue
            trial.record_id = record["id"]
            trial.restarts = max(trial.restarts, int(record["restarts"] or 0))
            saved = self.store.trial_checkpoints(record["id"])
            if saved and (trial.checkpoint is None or saved[-1]["step"] > trial.checkpoint_iteration):
                trial.checkpoint, trial.checkpoint_iteration = saved[-1]["uri"], int(saved[-1]["step"])
            if record["status"] in ("completed", "errored", "stopped") and not trial.finished:
                ended[trial.trial_id] = record
            known = {int(r.get("training_iteration", 0)) for r in trial.results}
            for row in self.store.trial_metrics(record["id"]):
                step = row.pop("step")
                if step not in known:
                    trial.results.append({**row, "training_iteration": step})
            trial.results.sort(key=lambda r: int(r.get("training_iteration", 0)))
        return ended

    def _update(self, trial: Trial, **fields: Any) -> None:
        if trial.record_id is not None:
            self._updates.setdefault(trial.record_id, {}).update(fields)

    def trials_starting(self, trials: list[Trial]) -> None:
        """Trials submitted now (what :meth:`trial_started` records for one), with what was heard, in one
        transaction: new ones get their records, restarted ones are pending again. A trial is recorded
        ``pending`` until it runs on a worker (it may wait for resources), then ``running``."""
        for trial in trials:  # (those with records; a new record is made pending, with its config)
            self._running.discard(trial.record_id)
            self._update(trial, status="pending", restarts=trial.restarts, config=trial.config, error=trial.error)
        self.flush(starting=trials)

    def trial_started(self, trial: Trial) -> None:
        if trial.record_id is None and self.experiment_id is not None:
            trial.record_id = self.store.add_trial(self.experiment_id, trial.trial_id, config=trial.config,
                                                   status="pending")
        # the config it runs with: a record made before a driver died may hold another (and PBT changes it)
        self._running.discard(trial.record_id)
        self._update(trial, status="pending", restarts=trial.restarts, config=trial.config)

    def trial_running(self, trial: Trial) -> None:
        """The trial's code runs on a worker now (it got its resources)."""
        if trial.record_id is not None and trial.record_id not in self._running and not trial.finished:
            self._running.add(trial.record_id)
            self._update(trial, status="running")

    def result(self, trial: Trial, result: dict[str, Any]) -> None:
        if trial.record_id is None:
            return
        self.trial_running(trial)  # a trial that reports runs (a Trainer's sends no start of its own)
        step = int(result.get("training_iteration", 0))
        metrics = {k: v for k, v in result.items() if k != "checkpoint_uri"}
        self._metrics.append((trial.record_id, step, metrics))
        fields: dict[str, Any] = {"iterations": step, "last_metrics": metrics}
        if result.get("checkpoint_uri"):
            fields["checkpoint_uri"] = result["checkpoint_uri"]
            self._checkpoints.append((trial.record_id, step, result["checkpoint_uri"], metrics))
        self._update(trial, **fields)

    def trial_paused(self, trial: Trial) -> None:
        self._running.discard(trial.record_id)
        self._update(trial, status="paused")

    def trial_restarted(self, trial: Trial) -> None:
        self._running.discard(trial.record_id)
        self._update(trial, status="pending", restarts=trial.restarts)

    def trial_ended(self, trial: Trial, *, stopped: bool = False) -> None:
        """``stopped``: it was stopped from outside (the control plane), recorded ``stopped``."""
        status = "stopped" if stopped and trial.status == TrialStatus.TERMINATED else _STATUS[trial.status]
        self._update(trial, status=status, error=trial.error, finished_at=datetime.now(timezone.utc))

    def interrupted(self, trial_ids: list[str]) -> None:
        """The cluster went away: these trials and the experiment are ``interrupted`` (restore resumes them)."""
        if self.experiment_id is None:
            return
        with contextlib.suppress(Exception):  # the store may be what went away: raise the cluster's error
            for record in self.store.list_trials(self.experiment_id):
                if record["name"] in trial_ids:
                    self._updates.setdefault(record["id"], {}).update(status="interrupted")
            self.flush()
            self.store.finish_experiment(self.experiment_id, "interrupted",
                                         error="the cluster went away; continue with Tuner.restore")

    def flush_if_due(self) -> None:
        """Flush if something waited ``FLUSH_INTERVAL_S`` (called every loop turn)."""
        if time.monotonic() - self._flushed_at >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self, starting: list[Trial] | None = None) -> None:
        """Write what is buffered in one transaction, after creating the records of ``starting`` trials."""
        self._flushed_at = time.monotonic()
        new = [t for t in starting or [] if t.record_id is None] if self.experiment_id is not None else []
        if not new and not self._metrics and not self._updates and not self._checkpoints:
            return
        metrics, updates, checkpoints = self._metrics, self._updates, self._checkpoints
        self._metrics, self._updates, self._checkpoints = [], {}, []
        new_trials = [(t.trial_id, t.config, "pending") for t in new]
        try:
            ids = self.store.record_batch(metrics, updates, checkpoints=checkpoints,
                                          experiment_id=self.experiment_id, new_trials=new_trials)
        except Exception:  # a reported result already sent twice is kept once
            ids = self.store.add_trials(self.experiment_id, new_trials) if self.experiment_id is not None else []
            for trial_id, step, values in metrics:  # fall back row by row (duplicates skipped)
                self.store.add_metrics(trial_id, step, values)
            for trial_id, fields in updates.items():
                self.store.update_trial(trial_id, **fields)
            for trial_id, step, uri, values in checkpoints:  # after the reports: restore trusts the pair
                self.store.add_checkpoint(trial_id, step, uri, values)
        for trial, record_id in zip(new, ids, strict=True):
            trial.record_id = record_id

    def prepared_data(self, usage: dict[str, Any]) -> None:
        """The prepared-data cache's use during the experiment (``train.prepared.usage_since``), when its
        trials used it, in the experiment's summary."""
        if self.experiment_id is not None and (usage["hits"] or usage["misses"]):
            self.store.set_experiment_summary(self.experiment_id, {"prepared_data": usage})

    def finish(self, trials: dict[str, Trial], *, stopped: bool = False) -> None:
        """``stopped``: the experiment was stopped from outside (the control plane), recorded ``stopped``."""
        if self.experiment_id is None:
            return
        errored = sum(1 for t in trials.values() if t.status == TrialStatus.ERRORED)
        status = "stopped" if stopped else "terminated" if not errored else "terminated_with_errors"
        self.store.finish_experiment(self.experiment_id, status)
