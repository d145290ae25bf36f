"""Fuse adjacent per-block operators into one task per block.

``MapBlocks(MapBlocks(x, f), g)`` and ``MapBlocks(Fused(x, [f]), g)`` become
``Fused(x, [f, g])``; a lone ``MapBlocks`` becomes a one-transform ``Fused``.
Reads are fused with the chain at lowering, so the whole chain runs where the
data is read. Transforms that declare other resources (``num_gpus``) are not
fused with their neighbours, nor with the read: only their own tasks wait for
a GPU worker, and the CPU work around them runs elsewhere.
"""

from __future__ import annotations

from ..logical.operators import Fused, LogicalOp, MapBlocks


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def rule(op: LogicalOp) -> LogicalOp | None:
    if isinstance(op, MapBlocks):
        child = op.input
        if isinstance(child, Fused) and child.resources == op.resources:
            return Fused(child.input, (*child.transforms, op.transform), _min(child.concurrency, op.concurrency),
                         op.resources)
        return Fused(child, (op.transform,), op.concurrency, op.resources)
    if isinstance(op, Fused) and isinstance(op.input, Fused) and op.input.resources == op.resources:
        child = op.input
        return Fused(child.input, (*child.transforms, *op.transforms), _min(child.concurrency, op.concurrency),
                     op.resources)
    return None
