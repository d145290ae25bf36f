"""Trials: one config's run, and its life from PENDING to TERMINATED or ERRORED."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TrialStatus", "Trial"]


class TrialStatus(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERRORED = "ERRORED"


@dataclass
class Trial:
    trial_id: str
    config: dict[str, Any]
    status: TrialStatus = TrialStatus.PENDING
    results: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: str | None = None
    checkpoint_iteration: int = 0  # the iteration whose report carried ``checkpoint``
    restarts: int = 0
    error: str | None = None
    stopped_early: bool = False
    record_id: int | None = None
    path: str | None = None  # the trial's folder (a local path or an fsspec URL), set when it first starts

    def __str__(self) -> str:
        return self.trial_id

    @property
    def local_path(self) -> str | None:
        """The trial's folder when it is on this machine's file system (Ray's ``Trial.local_path``), else None."""
        if self.path is None:
            return None
        if self.path.startswith("file://"):
            return self.path[len("file://"):]
        return None if "://" in self.path else self.path

    @property
    def last_result(self) -> dict[str, Any]:
        return self.results[-1] if self.results else {}

    @property
    def iteration(self) -> int:
        return int(self.last_result.get("training_iteration", 0))

    @property
    def finished(self) -> bool:
        return self.status in (TrialStatus.TERMINATED, TrialStatus.ERRORED)
