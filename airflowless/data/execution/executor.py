"""The streaming executor: runs a physical plan on Dask with backpressure.

:class:`Execution` submits the operators' tasks (keys named after the
operators, so the dashboard's task stream reads as the plan) and keeps per
operator statistics. :func:`stream` is the consumer side: it pulls block
futures through a window bounded by a task count and a memory budget, yields
them in order, and notices when nothing has progressed for
``DataContext.stall_timeout_s``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._dask_internals import task_states
from ...errors import AirflowlessError
from ..context import DataContext
from ..physical import tasks
from ..transforms import drop_instances
from . import handoff
from .pools import WorkerPool

if TYPE_CHECKING:
    from distributed import Client, Future

    from ..physical.operators import PhysicalOp

__all__ = ["Execution", "OpStats", "ResourceError", "StallError", "stream"]


class StallError(AirflowlessError, RuntimeError):
    """No block was produced for ``stall_timeout_s``; names the operator and why."""


class ResourceError(AirflowlessError, ValueError):
    """An operator's tasks ask for resources no worker offers; they would wait for ever."""


@dataclass
class OpStats:
    name: str
    tasks: int = 0
    done: int = 0
    blocks: int = 0
    rows: int | None = None
    bytes: int | None = None
    first_submit: float | None = None
    last_done: float | None = None

    @property
    def wall_s(self) -> float | None:
        if self.first_submit is None or self.last_done is None:
            return None
        return self.last_done - self.first_submit

    def add_output(self, rows: int, nbytes: int) -> None:
        """A block of this operator reached the driver: its rows and bytes are known (those that stay on the
        workers are counted in ``blocks`` only)."""
        self.rows = (self.rows or 0) + rows
        self.bytes = (self.bytes or 0) + nbytes


@dataclass
class Execution:
    """One run of a physical plan: its tasks, their owners, and their statistics."""

    client: Client
    ctx: DataContext = field(default_factory=DataContext.get_current)
    stats: dict[str, OpStats] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)  # task key -> operator name
    peak_held_bytes: int = 0
    shared_blocks: int = 0  # blocks the consumer read through shared memory (:mod:`.handoff`)

    def __post_init__(self) -> None:
        from ...control.live import Throttle

        self._inflight: dict[int, set[Future]] = {}
        self._pools: dict[int, WorkerPool] = {}
        self.execution_id = uuid.uuid4().hex[:12]
        self._live = Throttle()  # the live feed the control plane's data page shows, at most once a second
        info = self.client.scheduler_info(n_workers=-1).get("workers", {})
        self._offered = [w.get("resources", {}) for w in info.values()]
        self.threads = max(1, sum(w.get("nthreads", 1) for w in info.values()))
        memory = sum(w.get("memory_limit", 0) or 0 for w in info.values())
        self.budget = self.ctx.memory_budget_bytes or int(self.ctx.memory_budget_fraction * (memory or 4 << 30))
        self.max_in_flight = self.ctx.max_tasks_in_flight_per_op or 2 * self.threads

    def op_stats(self, op: PhysicalOp) -> OpStats:
        return self.stats.setdefault(op.name, OpStats(op.name))

    def submit(self, op: PhysicalOp, fn: Any, *args: Any, resources: dict[str, float] | None = None,
               workers: list[str] | None = None) -> Future:
        if resources and not any(all(r.get(k, 0) >= v for k, v in resources.items()) for r in self._offered):
            raise ResourceError(
                f"operator {op.name!r} asks each task for {resources} (map_batches' num_gpus), but no worker "
                f"of the cluster offers that (workers offer {self._offered or 'nothing: there are no workers'}); "
                "start workers with those resources (a GPU machine's embedded cluster has them) or drop num_gpus")
        key = f"{op.name}-{uuid.uuid4().hex}"
        future = self.client.submit(fn, *args, key=key, pure=False, resources=resources or None,
                                    workers=workers, allow_other_workers=workers is not None)
        stats = self.op_stats(op)
        stats.tasks += 1
        stats.first_submit = stats.first_submit or time.monotonic()
        self.owners[key] = op.name
        inflight = self._inflight.setdefault(id(op), set())
        inflight.add(future)

        def done(f: Future, stats: OpStats = stats, inflight: set[Future] = inflight) -> None:
            stats.done += 1
            if f.status == "finished":  # each task makes one block (one that failed or was cancelled: none)
                stats.blocks += 1
            stats.last_done = time.monotonic()
            inflight.discard(f)

        future.add_done_callback(done)
        return future

    def pool(self, op: PhysicalOp, low: int, high: int | None) -> WorkerPool:
        """The actor pool ``op``'s tasks run on in this execution (:mod:`.pools`)."""
        pool = self._pools.get(id(op))
        if pool is None:
            pool = self._pools[id(op)] = WorkerPool(low, high, getattr(op, "resources", None))
        return pool

    def own_instances(self, transforms: tuple[Any, ...]) -> tuple[Any, ...]:
        """``transforms`` with each class's instances keyed to this execution (an actor pool's, :mod:`.pools`)."""
        return tuple(dataclasses.replace(t, instance_key=f"{t.instance_key}-{self.execution_id}")
                     if getattr(t, "is_class", False) else t for t in transforms)

    def idle_member(self, op: PhysicalOp, pool: WorkerPool) -> str:
        """A member of ``op``'s pool free for its next task, waiting while none is (:mod:`.pools`)."""
        from distributed import wait

        since = time.monotonic()
        while (member := pool.idle_member(self.client)) is None:
            inflight = list(self._inflight.get(id(op), ()))
            if inflight:
                with contextlib.suppress(TimeoutError, concurrent.futures.CancelledError):  # one was cancelled
                    wait(inflight, timeout=1.0, return_when="FIRST_COMPLETED")
                since = time.monotonic()
            elif time.monotonic() - since > self.ctx.stall_timeout_s:
                raise StallError(f"operator {op.name!r} runs on an actor pool, and for {self.ctx.stall_timeout_s:.0f} "
                                 f"s no worker of the cluster could hold its instances (resources "
                                 f"{pool.resources or 'none'}); start workers, or raise "
                                 "DataContext.get_current().stall_timeout_s")
            else:
                time.sleep(0.2)  # no worker fits yet (an adaptive cluster at zero)
        return member

    def let_go_of_instances(self, op: PhysicalOp, transforms: tuple[Any, ...], pool: WorkerPool) -> None:
        """Once ``op``'s last task is done, its pool's members drop the class instances of ``transforms``."""
        keys = [t.instance_key for t in transforms if getattr(t, "is_class", False)]
        members = list(pool.members)
        if not keys or not members:
            return
        pending = [f for f in self._inflight.get(id(op), ()) if not f.cancelled()]  # a take() cancels the rest
        client = self.client

        def when_done() -> None:
            from distributed import wait

            with contextlib.suppress(Exception):  # a failed task is done too
                wait(pending)
            with contextlib.suppress(Exception):  # a cluster closing meanwhile holds no instances any more
                client.run(drop_instances, keys, workers=members, on_error="ignore")

        threading.Thread(target=when_done, name="airflowless-pool-release", daemon=True).start()

    def throttle(self, op: PhysicalOp, limit: int | None) -> None:
        """Wait until ``op`` has fewer than ``limit`` tasks running."""
        from distributed import wait

        if limit is None:
            return
        inflight = self._inflight.setdefault(id(op), set())
        while len(inflight) >= limit:
            with contextlib.suppress(TimeoutError):
                wait(list(inflight), timeout=1.0, return_when="FIRST_COMPLETED")

    def cancel(self, futures: Any) -> None:
        """Cancel the futures this execution submitted; others (materialized blocks) are left alone.

        Cancelling a key cancels it for every holder in this process, so a
        block of a materialized Dataset handed out by a stopped consumer must
        not be cancelled: the Dataset still needs it.
        """
        for future in futures:
            if str(future.key) in self.owners:
                future.cancel()

    def publish_live(self, top: PhysicalOp, held_bytes: int, waiting: str = "", *, finished: bool = False) -> None:
        """Tell the scheduler how this execution goes (:mod:`airflowless.control.live`), when due."""
        if not (self._live.fired if finished else self._live.due()):
            return  # an execution that ends within a second publishes nothing at all
        from ...control.live import DATA_TOPIC, publish

        operators = [{"operator": s.name, "tasks": s.tasks, "done": s.done, "running": s.tasks - s.done,
                      "blocks": s.blocks, "rows": s.rows, "bytes": s.bytes} for s in self.stats.values()]
        publish(self.client, DATA_TOPIC, {
            "execution": self.execution_id, "dataset": top.name, "operators": operators,
            "in_flight_bytes": held_bytes, "budget_bytes": self.budget, "waiting": waiting, "finished": finished})

    def gather(self, futures: list[Any]) -> list[Any]:
        return self.client.gather(futures) if futures else []

    def metas(self, blocks: list[Any]) -> list[tuple[int, int]]:
        """(rows, bytes) of each block, computed where the blocks are."""
        return self.gather([self.client.submit(tasks.block_meta, b, pure=False) for b in blocks])

    def rows(self, block: Any) -> int:
        return self.metas([block])[0][0]

    def window(self, average_bytes: float | None) -> int:
        if not average_bytes:
            return self.max_in_flight
        return max(1, min(self.max_in_flight, int(self.budget // average_bytes)))

    def stall(self, waiting: list[Future], idle_s: float) -> StallError:
        keys = [str(f.key) for f in waiting]

        try:
            found = task_states(self.client, keys)
        except Exception:  # the scheduler itself is unreachable
            found = {}
        workers = len(self.client.scheduler_info(n_workers=-1).get("workers", {}))
        head = keys[0] if keys else ""
        op = self.owners.get(head, "?")
        state, where, needs = found.get(head, ("unknown", None, None))
        if workers == 0:
            why = "the cluster has no workers"
        elif state == "no-worker":
            why = f"no worker can run its task (it needs {needs or 'nothing special'})"
        elif state == "processing":
            why = f"its task has been running on {where} for over {idle_s:.0f} s"
        elif state == "queued":
            why = "its task is queued: every worker thread is busy with other work"
        else:
            why = f"its task is {state}"
        return StallError(
            f"operator {op!r} made no progress for {idle_s:.0f} s: {why}. "
            "Raise DataContext.get_current().stall_timeout_s if this work is just slow."
        )


def stream(ex: Execution, op: PhysicalOp, *, fetch: bool = True, progress: Any = None,
           box: handoff.Inbox | None = None) -> Iterator[Any]:
    """Blocks of ``op`` in order (tables if ``fetch``, else finished futures), with backpressure.

    With an inbox ``box`` (``op``'s tasks end with :class:`.handoff.WriteShared`), each fetched block is
    read from where its task wrote it in this host's shared memory, or is the table itself where the
    task could not write it (:mod:`.handoff`).
    """
    from distributed import wait

    source = op.stream(ex)  # a generator: closed below
    box = box if fetch else None
    window: deque[Future] = deque()
    exhausted = False
    fetched_bytes: list[int] = []
    top = ex.op_stats(op)
    try:
        while True:
            average = sum(fetched_bytes[-16:]) / len(fetched_bytes[-16:]) if fetched_bytes else None
            while not exhausted and len(window) < ex.window(average):
                try:
                    window.append(next(source))
                except StopIteration:
                    exhausted = True
            if not window:
                return
            held = int(len(window) * max(fetched_bytes[-16:])) if average else 0
            if average:
                ex.peak_held_bytes = max(ex.peak_held_bytes, held)
            head = window[0]
            limit = ex.window(average)
            waiting = ("" if exhausted or len(window) < limit
                       else "budget" if limit < ex.max_in_flight else "backpressure")
            ex.publish_live(op, held, "upstream" if not head.done() else waiting)
            idle_since = time.monotonic()
            done_before = sum(f.done() for f in window)
            while not head.done():
                with contextlib.suppress(TimeoutError):
                    wait([head], timeout=1.0)
                done_now = sum(f.done() for f in window)
                if done_now != done_before:
                    idle_since, done_before = time.monotonic(), done_now
                elif time.monotonic() - idle_since > ex.ctx.stall_timeout_s:
                    raise ex.stall([f for f in window if not f.done()], time.monotonic() - idle_since)
                ex.publish_live(op, held, "upstream")
            if not fetch:
                window.popleft()
                yield head
                continue
            result = head.result()
            if isinstance(result, handoff.SharedBlock):
                ex.shared_blocks += 1
            table = box.open(result, str(head.key)) if box is not None else result
            window.popleft()  # only now: until its file is open, the finally below would remove it
            top.add_output(table.num_rows, table.nbytes)
            fetched_bytes.append(table.nbytes)
            if progress is not None:
                progress.update(1)
            yield table
    finally:
        try:
            if box is not None:  # before cancelling, which makes every future done
                box.let_go(window)
            ex.cancel(window)
            if box is not None:
                box.tidy()
        finally:
            source.close()  # type: ignore[attr-defined]
            ex.publish_live(op, 0, finished=True)
