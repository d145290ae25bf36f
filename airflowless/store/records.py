"""Plain records the store hands out: read-only views of rows.

A run the service queued is ``queued`` until its driver takes it. A run is
``running`` while its driver works, then ``succeeded``, ``failed`` or
``cancelled`` (SIGINT/SIGTERM of the driver). A run whose driver died without
saying so (``kill -9``, a lost machine) is read as ``abandoned``: the store
decides this when it reads the row (see :mod:`.liveness`). Rows written before
``cancelled`` existed say ``interrupted`` and are read as ``cancelled``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from .clock import aware
from .liveness import Driver, driver_alive

__all__ = ["RunRecord", "StageRecord", "RunStatus", "StageStatus", "ExperimentStatus", "run_from_row", "AUTO_FILLED"]

AUTO_FILLED = ("trial_id", "time_this_iter_s", "time_total_s", "timestamp", "date")
"""What the Tune driver adds to every report of a trial, as Ray Tune does (with ``training_iteration``); a
metric of the trial's own with one of these names is kept instead. Tables and plots leave them out."""


class RunStatus:
    """The states of a pipeline run."""

    QUEUED = "queued"  # waiting in the service's queue for a driver (airflowless.service)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"
    TIMED_OUT = "timed_out"  # ran past its pipeline's timeout: stopped, its clean-up stages run
    SKIPPED = "skipped"  # its deployment's run condition did not hold: never started (airflowless.service.conditions)
    TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, ABANDONED, TIMED_OUT, SKIPPED})
    LEGACY = {"interrupted": CANCELLED}  # older words, read as today's


class StageStatus:
    """The states of a stage run."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    CACHED = "cached"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"
    DONE = frozenset({SUCCEEDED, CACHED})
    TERMINAL = frozenset({SUCCEEDED, CACHED, FAILED, SKIPPED, CANCELLED, ABANDONED})
    UNSETTLED = frozenset({PENDING, RUNNING})


class ExperimentStatus:
    """The words shown for experiments and trials; the store keeps Ray Tune's ``terminated``.

    >>> ExperimentStatus.shown("terminated")
    'completed'
    """

    SHOWN = {"terminated": "completed", "terminated_with_errors": "completed_with_errors"}

    @classmethod
    def shown(cls, status: str) -> str:
        """The word users see for a stored experiment or trial status."""
        return cls.SHOWN.get(status, status)


@dataclass(frozen=True)
class StageRecord:
    run_id: int
    node: str
    stage: str
    status: str
    upstream: list[str]
    cache_key: str
    task_key: str | None = None
    attempts: int = 0
    worker: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    output_uri: str | None = None
    output_summary: str | None = None
    reused_from_run: int | None = None
    error: str | None = None
    traceback: str | None = None
    log_uri: str | None = None  # the latest attempt's log; attempt n's is beside it (airflowless.dag.logs)


@dataclass(frozen=True)
class RunRecord:
    id: int
    pipeline: str
    module: str
    params: dict[str, Any]
    status: str
    created_at: datetime
    finished_at: datetime | None = None
    address: str | None = None
    resumed_from: int | None = None
    error: str | None = None
    driver_host: str | None = None
    driver_pid: int | None = None
    driver_started: float | None = None
    heartbeat_at: datetime | None = None
    resumed_by: int | None = None
    target: str | None = None
    deployment_id: int | None = None
    trigger: str | None = None
    priority: int | None = None
    pool: str | None = None
    interval_start: datetime | None = None
    interval_end: datetime | None = None
    rerun: int | None = None
    queue_reason: str | None = None
    claimed_by: int | None = None
    claimed_at: datetime | None = None
    backfill_id: int | None = None
    upstream_run: int | None = None
    upstream_runs: dict[str, int] | None = None
    trigger_detail: str | None = None
    started_at: datetime | None = None  # when it began running (None: queued, or recorded before this was kept)
    driver_log_uri: str | None = None  # a service's driver: the copy of its output, readable from other machines
    stages: list[StageRecord] = field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        """How long it ran (not how long it waited in the queue before)."""
        if self.finished_at is None:
            return None
        return (self.finished_at - (self.started_at or self.created_at)).total_seconds()

    def stage(self, node: str) -> StageRecord:
        for record in self.stages:
            if record.node == node:
                return record
        raise KeyError(f"run {self.id} has no stage {node!r}; it has {[s.node for s in self.stages]}")


def run_from_row(row: Any, stages: list[StageRecord]) -> RunRecord:
    """A ``runs`` row as users should see it: legacy words mapped, a dead driver's run ``abandoned``."""
    data = dict(row)
    for key in ("created_at", "finished_at", "heartbeat_at", "interval_start", "interval_end", "claimed_at",
                "started_at"):
        data[key] = aware(data[key])
    data["status"] = RunStatus.LEGACY.get(data["status"], data["status"])
    if data["status"] == RunStatus.RUNNING:
        driver = Driver(data["driver_host"], data["driver_pid"], data["driver_started"])
        if not driver_alive(driver, heartbeat_at=data["heartbeat_at"] or data["created_at"], now=time.time()):
            data["status"] = RunStatus.ABANDONED
            data["error"] = data["error"] or "the driver died before the run ended"
            stages = [replace(s, status=StageStatus.ABANDONED) if s.status in StageStatus.UNSETTLED else s
                      for s in stages]
    return RunRecord(**data, stages=stages)
