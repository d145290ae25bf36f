"""Rank 0's reports, completed with metrics that other ranks computed for the same step.

A loop may share out the work that produces its metrics (LightGBM: rank 0
scores its training rows while rank 1 scores the validation set). Rank 0 then
reports with ``gather=(1,)``: its report waits until rank 1's report of the
same step has come and takes the metrics it does not have itself. Reports of
other ranks are kept only until rank 0 has reported their step; rank 0's
reports are delivered in step order, each once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["ReportGatherer"]


class ReportGatherer:
    """Feed it every event of a group (any order, repeats allowed); it calls ``deliver`` with rank 0's reports."""

    def __init__(self, deliver: Callable[[dict[str, Any]], None]) -> None:
        self._deliver = deliver
        self._waiting: deque[dict[str, Any]] = deque()  # rank 0's reports whose parts are not all here
        self._parts: dict[tuple[int, int], dict[str, Any]] = {}  # (rank, step) -> metrics
        self._seen: set[int] = set()  # rank 0's steps received
        self._delivered = -1

    def add(self, message: dict[str, Any]) -> None:
        if message.get("event") != "report":
            return
        rank, step = message["rank"], message["step"]
        if rank == 0:
            if step in self._seen:
                return
            self._seen.add(step)
            self._waiting.append(message)
        elif step > self._delivered:
            self._parts[(rank, step)] = message["metrics"]
        self._flush()

    def close(self) -> None:
        """Deliver what is still waiting, with the parts that came (a rank ended without reporting)."""
        self._flush(complete=False)

    def _flush(self, complete: bool = True) -> None:
        while self._waiting:
            head = self._waiting[0]
            wanted = [(rank, head["step"]) for rank in head.get("gather", ())]
            if complete and any(key not in self._parts for key in wanted):
                return
            self._waiting.popleft()
            metrics: dict[str, Any] = {}
            for key in wanted:
                metrics.update(self._parts.get(key, {}))
            metrics.update(head["metrics"])  # rank 0's own values win
            self._delivered = head["step"]
            self._parts = {key: value for key, value in self._parts.items() if key[1] > self._delivered}
            self._deliver({**head, "metrics": metrics})
