"""An actor pool on Dask: the workers an operator's class instances live on, grown while work waits.

Ray runs a ``map_batches`` class on a pool of actors that starts at
``min_size`` and adds an actor while every actor is busy and inputs wait, up
to ``max_size``; each actor runs one call at a time. Here an instance lives in
a worker process (:class:`..transforms.MapBatchesFn`), so the pool is a set of
workers, and each task goes to one member that has no task of the operator in
flight: a member is added when every member has one and another block is
ready, and the next block waits for a member while the pool is at its
maximum. Restrictions are loose (``allow_other_workers``): a task whose
member left the cluster runs elsewhere instead of waiting for ever, and the
member is dropped from the pool. The instances are per execution (their key
names it), so two runs of one Dataset never share or drop each other's, and
they are let go when the operator is done.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

__all__ = ["WorkerPool"]

_LISTING_S = 1.0  # how long the cluster's worker listing is reused


class WorkerPool:
    """The members of one operator's pool: ``low`` at first, up to ``high`` (None: every worker that fits)."""

    def __init__(self, low: int, high: int | None, resources: Mapping[str, float] | None = None) -> None:
        self.low, self.high = low, high
        self.resources = dict(resources or {})
        self.members: list[str] = []
        self._tasks: dict[str, Any] = {}  # member -> the future of its task in flight
        self._listing: tuple[float, list[str]] = (-_LISTING_S, [])

    def idle_member(self, client: Any) -> str | None:
        """A member with no task in flight, growing the pool when every member has one; None while the pool
        is at its maximum and busy, or no worker fits."""
        workers = self._workers(client)
        self.members = [w for w in self.members if w in workers]  # members that left the cluster
        spare = [w for w in workers if w not in self.members]
        while len(self.members) < (self.low if self.high is None else min(self.low, self.high)) and spare:
            self.members.append(spare.pop(0))
        for member in self.members:
            task = self._tasks.get(member)
            if task is None or task.done():
                return member
        if spare and (self.high is None or len(self.members) < self.high):
            self.members.append(spare[0])
            return spare[0]
        return None

    def assign(self, member: str, future: Any) -> None:
        self._tasks[member] = future

    def _workers(self, client: Any) -> list[str]:
        """The cluster's workers that offer the tasks' resources (listed at most once a second)."""
        listed_at, workers = self._listing
        if time.monotonic() - listed_at < _LISTING_S:
            return workers
        info = client.scheduler_info(n_workers=-1).get("workers", {})
        workers = sorted(address for address, w in info.items()
                         if all(w.get("resources", {}).get(k, 0) >= v for k, v in self.resources.items()))
        self._listing = (time.monotonic(), workers)
        return workers
