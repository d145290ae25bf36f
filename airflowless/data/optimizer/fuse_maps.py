"""Fuse adjacent per-block operators into one task per block.

``MapBlocks(MapBlocks(x, f), g)`` and ``MapBlocks(Fused(x, [f]), g)`` become
``Fused(x, [f, g])``; a lone ``MapBlocks`` becomes a one-transform ``Fused``.
Reads are fused with the chain at lowering, so the whole chain runs where the
data is read. Transforms that declare other resources (``num_gpus``) or run on
an actor pool are not fused with their neighbours, nor with the read: only
their own tasks wait for a GPU worker or a pool's member, and the work around
them runs elsewhere.
"""

from __future__ import annotations

from ..logical.operators import Fused, LogicalOp, MapBlocks


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _alike(a: MapBlocks | Fused, b: MapBlocks | Fused) -> bool:
    return a.resources == b.resources and a.pool is None and b.pool is None


def rule(op: LogicalOp) -> LogicalOp | None:
    if isinstance(op, MapBlocks):
        child = op.input
        if isinstance(child, Fused) and _alike(child, op):
            return Fused(child.input, (*child.transforms, op.transform), _min(child.concurrency, op.concurrency),
                         op.resources)
        return Fused(child, (op.transform,), op.concurrency, op.resources, op.pool)
    if isinstance(op, Fused) and isinstance(op.input, Fused) and _alike(op.input, op):
        child = op.input
        return Fused(child.input, (*child.transforms, *op.transforms), _min(child.concurrency, op.concurrency),
                     op.resources)
    return None
