"""Move a limit toward the source, so fewer rows are read and transformed.

A limit moves below transforms that keep every row in order (select, drop,
rename, add_column, map); two limits merge; a limit right above a reader is
also handed to the reader, which then reads at most that many rows per task.
"""

from __future__ import annotations

import dataclasses

from ..logical.operators import Limit, LogicalOp, MapBlocks, Read


def rule(op: LogicalOp) -> LogicalOp | None:
    if not isinstance(op, Limit):
        return None
    child = op.input
    if isinstance(child, Limit):
        return Limit(child.input, min(op.n, child.n))
    if isinstance(child, MapBlocks) and child.transform.one_to_one:
        return dataclasses.replace(child, input=Limit(child.input, op.n))  # its concurrency and resources kept
    if isinstance(child, Read) and (child.limit is None or child.limit > op.n):
        return Limit(Read(child.source, child.columns, child.filter, op.n), op.n)
    return None
