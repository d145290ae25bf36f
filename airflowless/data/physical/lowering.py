"""Lowering: the table from logical operators to physical ones.

Logical nodes never import this module; this module imports them. Adding an
operator means a logical class, a lowering function and an entry in
:data:`LOWERING`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..logical import operators as lo
from . import exchanges
from .operators import BarrierOp, BlocksOp, LimitOp, MapOp, PhysicalOp, ReadOp, SharedOp, UnionOp

__all__ = ["LOWERING", "lower"]


def _read(op: lo.Read, inputs: list[PhysicalOp]) -> PhysicalOp:
    read_tasks = op.source.plan(columns=op.columns, filter=op.filter)
    return ReadOp(op.source, read_tasks, op.columns, op.filter, op.limit, (), None, op.label.split("[")[0])


def _fused(op: lo.Fused, inputs: list[PhysicalOp]) -> PhysicalOp:
    (child,) = inputs
    name = "+".join(t.name for t in op.transforms)
    if isinstance(child, ReadOp) and not child.transforms and not op.resources and op.pool is None:
        return ReadOp(child.source, child.read_tasks, child.columns, child.filter, child.limit,
                      op.transforms, op.concurrency, f"{child.name}+{name}")
    return MapOp(child, op.transforms, op.concurrency, name, dict(op.resources), op.pool)


def _map(op: lo.MapBlocks, inputs: list[PhysicalOp]) -> PhysicalOp:
    return _fused(lo.Fused(op.input, (op.transform,), op.concurrency, op.resources, op.pool), inputs)


def _barrier(exchange: Callable[..., list[Any]], **params_of: Callable[[Any], Any]) -> Callable[..., PhysicalOp]:
    def lower_barrier(op: lo.LogicalOp, inputs: list[PhysicalOp]) -> PhysicalOp:
        params = {name: get(op) for name, get in params_of.items()}
        return BarrierOp(tuple(inputs), exchange, op.label, params)

    return lower_barrier


LOWERING: dict[type, Callable[..., PhysicalOp]] = {
    lo.Read: _read,
    lo.FromBlocks: lambda op, inputs: BlocksOp(op.blocks, op.name),
    lo.Fused: _fused,
    lo.MapBlocks: _map,
    lo.Limit: lambda op, inputs: LimitOp(inputs[0], op.n, name=op.label),
    lo.Union: lambda op, inputs: UnionOp(tuple(inputs)),
    lo.Repartition: _barrier(exchanges.repartition, num_blocks=lambda o: o.num_blocks, shuffle=lambda o: o.shuffle,
                             seed=lambda o: o.seed),
    lo.RandomShuffle: _barrier(exchanges.random_shuffle, seed=lambda o: o.seed, num_blocks=lambda o: o.num_blocks),
    lo.Sort: _barrier(exchanges.sort, keys=lambda o: o.keys, descending=lambda o: o.descending),
    lo.Aggregate: _barrier(exchanges.aggregate, keys=lambda o: o.keys, aggs=lambda o: o.aggs),
    lo.MapGroups: _barrier(exchanges.map_groups, keys=lambda o: o.keys, fn=lambda o: o.fn,
                           batch_format=lambda o: o.batch_format),
    lo.Join: _barrier(exchanges.join, on=lambda o: o.on, right_on=lambda o: o.right_on or o.on,
                      how=lambda o: o.how, num_blocks=lambda o: o.num_blocks),
    lo.Zip: _barrier(exchanges.zip_),
    lo.RowSlice: _barrier(exchanges.row_slice, spec=lambda o: o.spec, part=lambda o: o.part),
    lo.Shared: lambda op, inputs: SharedOp(inputs[0], op.token, op.label),
}


def lower(op: lo.LogicalOp) -> PhysicalOp:
    """The physical operator tree for an (optimized) logical plan."""
    try:
        planner = LOWERING[type(op)]
    except KeyError:
        raise NotImplementedError(f"no lowering for logical operator {type(op).__name__}") from None
    return planner(op, [lower(child) for child in op.inputs])
