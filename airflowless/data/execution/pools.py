"""An actor pool on Dask: the workers an operator's class instances live on, grown while work waits.

Ray runs a ``map_batches`` class on a pool of actors that starts at
``min_size`` and adds an actor while every actor is busy and inputs wait, up
to ``max_size``. Here an instance lives in a worker process
(:class:`..transforms.MapBatchesFn`), so the pool is a set of workers: the
operator's tasks are submitted restricted to the members, one task per
member at a time (the executor's throttle), and a member is added when every
member has a task and another block is ready. Restrictions are loose
(``allow_other_workers``): when every member has left the cluster, Dask runs
the task elsewhere instead of holding it for ever, and the next submission
finds new members. When the operator is done, the members drop its instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["WorkerPool"]


class WorkerPool:
    """The members of one operator's pool: ``low`` at first, up to ``high`` (None: every worker that fits)."""

    def __init__(self, low: int, high: int | None, resources: Mapping[str, float] | None = None) -> None:
        self.low, self.high = low, high
        self.resources = dict(resources or {})
        self.members: list[str] = []
        self.peak = 0  # the most members it had at once (the operator's stats say so)

    def place(self, client: Any, busy: int) -> list[str]:
        """The members the next task may run on, after growing by one when all ``busy`` ones have a task."""
        workers = self._workers(client)
        self.members = [w for w in self.members if w in workers]  # members that left the cluster
        spare = [w for w in workers if w not in self.members]
        want = self.low if self.high is None else min(self.low, self.high)
        while len(self.members) < want and spare:
            self.members.append(spare.pop(0))
        if busy >= len(self.members) and spare and (self.high is None or len(self.members) < self.high):
            self.members.append(spare.pop(0))
        self.peak = max(self.peak, len(self.members))
        return list(self.members)

    def _workers(self, client: Any) -> list[str]:
        """The cluster's workers that offer the tasks' resources, least busy first (then by address)."""
        info = client.scheduler_info(n_workers=-1).get("workers", {})
        fits = [(address, w) for address, w in info.items()
                if all(w.get("resources", {}).get(k, 0) >= v for k, v in self.resources.items())]
        return [address for address, _ in sorted(fits, key=lambda item: (_load(item[1]), item[0]))]


def _load(worker: dict[str, Any]) -> int:
    metrics = worker.get("metrics", {})
    return int(metrics.get("task_counts", {}).get("executing", 0) or metrics.get("executing", 0) or 0)
