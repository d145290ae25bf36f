"""Plain records the store hands out: read-only views of rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["RunRecord", "StageRecord", "RunStatus", "StageStatus"]


class RunStatus:
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    TERMINAL = frozenset({SUCCEEDED, FAILED, INTERRUPTED})


class StageStatus:
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    CACHED = "cached"
    FAILED = "failed"
    SKIPPED = "skipped"
    DONE = frozenset({SUCCEEDED, CACHED})
    TERMINAL = frozenset({SUCCEEDED, CACHED, FAILED, SKIPPED})


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
    stages: list[StageRecord] = field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.created_at).total_seconds()

    def stage(self, node: str) -> StageRecord:
        for record in self.stages:
            if record.node == node:
                return record
        raise KeyError(f"run {self.id} has no stage {node!r}; it has {[s.node for s in self.stages]}")
