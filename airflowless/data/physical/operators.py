"""Physical operators: how a plan runs, as streams of block futures.

The streaming protocol: :meth:`PhysicalOp.stream` is a generator that yields
Dask futures of blocks, in order, submitting a task only when its consumer
pulls. A consumer that pulls slowly therefore holds back every operator
under it (backpressure), and one that stops pulling closes the generators,
which cancel what they submitted and did not hand out (never blocks of a
materialized Dataset, which other consumers still need).

    >>> for future in op.stream(execution):        # doctest: +SKIP
    ...     table = future.result()

Map operators run one task per block (the fused chain in one task, named
after it). Barrier operators (shuffle, sort, repartition, groupby, join, zip)
pull all their input first, then hand out the futures of their exchange.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import tasks

if TYPE_CHECKING:
    from distributed import Future

    from ..execution.executor import Execution

__all__ = ["PhysicalOp", "ReadOp", "MapOp", "BlocksOp", "SharedOp", "LimitOp", "BarrierOp", "UnionOp", "render"]


class PhysicalOp:
    name: str = "op"

    @property
    def children(self) -> tuple[PhysicalOp, ...]:
        return ()

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        raise NotImplementedError

    def planned_blocks(self) -> int | None:
        """How many blocks this operator will produce, if known before running."""
        return None


@dataclass(eq=False)
class ReadOp(PhysicalOp):
    """One task per read task: read, then the fused transforms, in the same task."""

    source: Any
    read_tasks: list[Any]
    columns: tuple[str, ...] | None = None
    filter: Any = None
    limit: int | None = None
    transforms: tuple[Any, ...] = ()
    concurrency: int | None = None
    name: str = "Read"

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        reader = self.source.task_reader()
        for task in self.read_tasks:
            ex.throttle(self, self.concurrency)
            yield ex.submit(self, tasks.read_block, reader, task, self.columns, self.filter,
                            self.limit, self.transforms)

    def planned_blocks(self) -> int | None:
        return len(self.read_tasks)


@dataclass(eq=False)
class MapOp(PhysicalOp):
    input: PhysicalOp
    transforms: tuple[Any, ...]
    concurrency: int | None = None
    name: str = "Map"
    resources: dict[str, float] | None = None  # each task's, from map_batches(num_gpus=...)
    pool: tuple[int, int | None] | None = None  # an actor pool's (min, max) workers (..execution.pools)

    @property
    def children(self) -> tuple[PhysicalOp, ...]:
        return (self.input,)

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        source = self.input.stream(ex)
        if self.pool is None:
            try:
                for block in source:
                    ex.throttle(self, self.concurrency)
                    yield ex.submit(self, tasks.map_block, block, self.transforms, resources=self.resources)
            finally:
                source.close()
            return
        pool = ex.pool(self, *self.pool)
        transforms = ex.own_instances(self.transforms)  # this run's instances, not another run's of the Dataset
        try:
            for block in source:
                member = ex.idle_member(self, pool)  # one task per member; a member more while all are busy
                future = ex.submit(self, tasks.map_block, block, transforms, resources=self.resources,
                                   workers=[member])
                pool.assign(member, future)
                yield future
        finally:
            source.close()
            ex.let_go_of_instances(self, transforms, pool)

    def planned_blocks(self) -> int | None:
        return self.input.planned_blocks()


@dataclass(eq=False)
class BlocksOp(PhysicalOp):
    """Blocks already on the cluster."""

    blocks: tuple[Any, ...]
    name: str = "FromBlocks"

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        yield from self.blocks

    def planned_blocks(self) -> int | None:
        return len(self.blocks)


@dataclass(eq=False)
class SharedOp(PhysicalOp):
    """Its input's blocks, computed at the first run and kept for later runs (see :mod:`..execution.shared`)."""

    input: PhysicalOp
    token: str
    name: str = "Shared"

    @property
    def children(self) -> tuple[PhysicalOp, ...]:
        return (self.input,)

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        from ..execution.shared import run_shared

        yield from run_shared(self.token, ex, lambda: list(self.input.stream(ex)))


@dataclass(eq=False)
class LimitOp(PhysicalOp):
    """The first ``n`` rows; stops pulling its input once it has them."""

    input: PhysicalOp
    n: int
    window: int = 4
    name: str = "Limit"

    @property
    def children(self) -> tuple[PhysicalOp, ...]:
        return (self.input,)

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        remaining = self.n
        if remaining <= 0:
            return
        source = self.input.stream(ex)
        ahead: deque[Future] = deque()
        try:
            while remaining > 0:
                while len(ahead) < self.window:
                    try:
                        ahead.append(next(source))
                    except StopIteration:
                        break
                if not ahead:
                    return
                block = ahead.popleft()
                rows = ex.rows(block)
                if rows <= remaining:
                    remaining -= rows
                    yield block
                else:
                    yield ex.submit(self, tasks.slice_block, block, 0, remaining)
                    remaining = 0
        finally:
            ex.cancel(ahead)
            source.close()


@dataclass(eq=False)
class BarrierOp(PhysicalOp):
    """All input blocks first, then ``exchange(ex, op, inputs) -> output futures``."""

    inputs: tuple[PhysicalOp, ...]
    exchange: Callable[..., list[Any]]
    name: str = "AllToAll"
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def children(self) -> tuple[PhysicalOp, ...]:
        return self.inputs

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        collected = [list(child.stream(ex)) for child in self.inputs]
        outputs = self.exchange(ex, self, *collected, **self.params)
        yield from outputs


@dataclass(eq=False)
class UnionOp(PhysicalOp):
    inputs: tuple[PhysicalOp, ...]
    name: str = "Union"

    @property
    def children(self) -> tuple[PhysicalOp, ...]:
        return self.inputs

    def stream(self, ex: Execution) -> Generator[Future, None, None]:
        for child in self.inputs:
            source = child.stream(ex)
            try:
                yield from source
            finally:
                source.close()

    def planned_blocks(self) -> int | None:
        counts = [c.planned_blocks() for c in self.inputs]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


def render(op: PhysicalOp, indent: int = 0) -> str:
    lines = ["  " * indent + ("" if indent == 0 else "<- ") + f"{type(op).__name__}[{op.name}]"]
    for child in op.children:
        lines.append(render(child, indent + 1))
    return "\n".join(lines)


