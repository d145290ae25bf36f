"""Logical operators: frozen descriptions of what a Dataset computes.

Each node names its inputs (``inputs``) and nothing about how it runs; the
optimizer rewrites trees of them and :mod:`..physical.lowering` maps them to
physical operators.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..expressions import describe
from ..transforms import BlockTransform

__all__ = ["LogicalOp", "Read", "SplitSpec", "RowSlice", "Shared", "FromBlocks", "MapBlocks", "Fused", "Limit", "Repartition",
           "RandomShuffle", "Sort", "Aggregate", "MapGroups", "Union", "Zip", "Join", "walk"]


@dataclass(frozen=True, eq=False)
class LogicalOp:
    @property
    def inputs(self) -> tuple[LogicalOp, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                     if f.name in ("input", "left", "right"))

    def with_inputs(self, *inputs: LogicalOp) -> LogicalOp:
        names = [f.name for f in dataclasses.fields(self) if f.name in ("input", "left", "right")]
        return dataclasses.replace(self, **dict(zip(names, inputs, strict=True)))

    @property
    def label(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, eq=False)
class Read(LogicalOp):
    source: Any  # connectors.base.Datasource
    columns: tuple[str, ...] | None = None
    filter: Any = None  # a pyarrow.compute.Expression
    limit: int | None = None

    @property
    def label(self) -> str:
        extras = []
        if self.columns is not None:
            extras.append(f"columns={list(self.columns)}")
        if self.filter is not None:
            extras.append(f"filter={describe(self.filter)}")
        if self.limit is not None:
            extras.append(f"limit={self.limit}")
        name = "Read" + self.source.name.capitalize()
        return f"{name}[{', '.join(extras)}]" if extras else name


@dataclass(frozen=True, eq=False)
class FromBlocks(LogicalOp):
    """Blocks already on the cluster (futures), e.g. from ``materialize`` or a split."""

    blocks: tuple[Any, ...]
    rows: tuple[int, ...]
    name: str = "FromBlocks"

    @property
    def label(self) -> str:
        return f"{self.name}[{len(self.blocks)} blocks, {sum(self.rows)} rows]"


@dataclass(frozen=True, eq=False)
class MapBlocks(LogicalOp):
    """One per-block transform (map_batches, map, flat_map, filter, select, drop, rename, add_column)."""

    input: LogicalOp
    transform: BlockTransform
    concurrency: int | None = None
    resources: tuple[tuple[str, float], ...] = ()  # what each task declares (map_batches' num_gpus)
    pool: tuple[int, int | None] | None = None  # an actor pool's (min, max) workers (data.compute.actor_pool)

    @property
    def label(self) -> str:
        return self.transform.name


@dataclass(frozen=True, eq=False)
class Fused(LogicalOp):
    """Adjacent per-block transforms run in one task per block."""

    input: LogicalOp
    transforms: tuple[BlockTransform, ...]
    concurrency: int | None = None
    resources: tuple[tuple[str, float], ...] = ()
    pool: tuple[int, int | None] | None = None

    @property
    def label(self) -> str:
        return "+".join(t.name for t in self.transforms)


@dataclass(frozen=True)
class SplitSpec:
    """Where a dataset is cut, resolved against its row count when it runs.

    ``kind``: ``indices`` (row positions), ``fractions`` (cumulative fractions),
    ``even`` (n parts, sizes differing by at most one) or ``equal`` (n parts of
    exactly ``total // n`` rows).
    """

    kind: str
    values: tuple[float, ...]

    def bounds(self, total: int) -> list[int]:
        if self.kind == "indices":
            return [0, *[min(int(v), total) for v in self.values], total]
        if self.kind == "from_end":
            return [0, max(0, total - int(self.values[0])), total]
        if self.kind == "fractions":
            acc, cuts = 0.0, [0]
            for v in self.values:
                acc += v
                cuts.append(int(round(total * acc)))
            return [*cuts, total]
        n = int(self.values[0])
        if self.kind == "equal":
            return [(total // n) * i for i in range(n + 1)]
        base, extra = divmod(total, n)
        cuts = [0]
        for i in range(n):
            cuts.append(cuts[-1] + base + (1 if i < extra else 0))
        return cuts


@dataclass(frozen=True, eq=False)
class Shared(LogicalOp):
    """Its input, run once for every plan that holds this node (the parts of one split).

    ``token`` names the kept result (see :mod:`..execution.shared`); the
    parts of a split therefore cut the same rows, whatever the input draws at random.
    """

    input: LogicalOp
    token: str

    @property
    def label(self) -> str:
        return f"Shared[{self.token[:8]}]"


@dataclass(frozen=True, eq=False)
class RowSlice(LogicalOp):
    """Part ``part`` of the input cut by ``spec`` (a barrier: it needs the row count)."""

    input: LogicalOp
    spec: SplitSpec
    part: int

    @property
    def label(self) -> str:
        return f"RowSlice[{self.spec.kind} {list(self.spec.values)}, part {self.part}]"


@dataclass(frozen=True, eq=False)
class Limit(LogicalOp):
    input: LogicalOp
    n: int

    @property
    def label(self) -> str:
        return f"Limit[{self.n}]"


@dataclass(frozen=True, eq=False)
class Repartition(LogicalOp):
    """``num_blocks`` blocks of near-equal rows in order, or at random (``shuffle``, with ``seed``)."""

    input: LogicalOp
    num_blocks: int
    shuffle: bool = False
    seed: int | None = None

    @property
    def label(self) -> str:
        return f"Repartition[{self.num_blocks}{', shuffle' if self.shuffle else ''}]"


@dataclass(frozen=True, eq=False)
class RandomShuffle(LogicalOp):
    """Rows in a random order fixed by ``seed`` (``Dataset.random_shuffle`` draws one when none is given)."""

    input: LogicalOp
    seed: int | None = None
    num_blocks: int | None = None
    drawn: bool = False  # the seed was drawn, not given: a training fit shuffles again each epoch (train.epochs)


@dataclass(frozen=True, eq=False)
class Sort(LogicalOp):
    input: LogicalOp
    keys: tuple[str, ...]
    descending: tuple[bool, ...]  # one per key

    @property
    def label(self) -> str:
        return f"Sort[{', '.join(k + (' desc' if d else '') for k, d in zip(self.keys, self.descending, strict=True))}]"


@dataclass(frozen=True, eq=False)
class Aggregate(LogicalOp):
    """Group by ``keys`` (none: the whole dataset) and compute ``aggs``."""

    input: LogicalOp
    keys: tuple[str, ...]
    aggs: tuple[Any, ...]  # aggregate.AggregateFn

    @property
    def label(self) -> str:
        by = f" by {', '.join(self.keys)}" if self.keys else ""
        return f"Aggregate[{', '.join(a.output_name for a in self.aggs)}{by}]"


@dataclass(frozen=True, eq=False)
class MapGroups(LogicalOp):
    input: LogicalOp
    keys: tuple[str, ...]
    fn: Any
    batch_format: str = "pandas"

    @property
    def label(self) -> str:
        return f"MapGroups[{getattr(self.fn, '__name__', 'fn')} by {', '.join(self.keys)}]"


@dataclass(frozen=True, eq=False)
class Union(LogicalOp):
    parts: tuple[LogicalOp, ...] = field(default=())

    @property
    def inputs(self) -> tuple[LogicalOp, ...]:
        return self.parts

    def with_inputs(self, *inputs: LogicalOp) -> LogicalOp:
        return Union(tuple(inputs))


@dataclass(frozen=True, eq=False)
class Zip(LogicalOp):
    left: LogicalOp
    right: LogicalOp


@dataclass(frozen=True, eq=False)
class Join(LogicalOp):
    left: LogicalOp
    right: LogicalOp
    on: tuple[str, ...]
    how: str = "inner"
    right_on: tuple[str, ...] | None = None
    num_blocks: int | None = None

    @property
    def label(self) -> str:
        return f"Join[{self.how} on {', '.join(self.on)}]"


def walk(op: LogicalOp) -> list[LogicalOp]:
    """Every node of the tree, inputs first."""
    seen: list[LogicalOp] = []
    for child in op.inputs:
        seen.extend(walk(child))
    seen.append(op)
    return seen


def render(op: LogicalOp, indent: int = 0) -> str:
    """The tree as indented text, the output on top."""
    lines = ["  " * indent + ("" if indent == 0 else "<- ") + op.label]
    for child in op.inputs:
        lines.append(render(child, indent + 1))
    return "\n".join(lines)
