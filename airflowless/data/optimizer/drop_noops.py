"""Drop operators that change nothing.

A selection right above another selection keeps only the outer one (after
checking the columns exist in the inner one); a repartition directly above a
repartition keeps only the outer one; a random shuffle under a sort is wasted.
"""

from __future__ import annotations

import dataclasses

from ..logical.operators import LogicalOp, MapBlocks, RandomShuffle, Repartition, Sort
from ..transforms import ProjectFn


def rule(op: LogicalOp) -> LogicalOp | None:
    if isinstance(op, MapBlocks) and isinstance(op.transform, ProjectFn):
        child = op.input
        if (isinstance(child, MapBlocks) and isinstance(child.transform, ProjectFn)
                and set(op.transform.columns) <= set(child.transform.columns)):
            return MapBlocks(child.input, op.transform, op.concurrency)
    if isinstance(op, Repartition) and isinstance(op.input, Repartition) and not op.input.shuffle:
        return dataclasses.replace(op, input=op.input.input)
    if isinstance(op, Sort) and isinstance(op.input, RandomShuffle):
        return Sort(op.input.input, op.keys, op.descending)
    return None
