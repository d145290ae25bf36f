"""Push a column selection into the reader, so unread columns are never read.

``select_columns`` directly above a reader that supports projection becomes
the reader's ``columns``; a selection above an expression filter moves below
it when the filter only uses selected columns.
"""

from __future__ import annotations

import dataclasses

from ..logical.operators import LogicalOp, MapBlocks, Read
from ..transforms import FilterFn, ProjectFn
from .push_filter import reads_only


def rule(op: LogicalOp) -> LogicalOp | None:
    if not (isinstance(op, MapBlocks) and isinstance(op.transform, ProjectFn)):
        return None
    columns = op.transform.columns
    child = op.input
    if isinstance(child, Read) and child.source.supports_projection:
        if child.columns is not None and not set(columns) <= set(child.columns):
            return None  # selecting a column the read drops: keep the error where it is
        return Read(child.source, columns, child.filter, child.limit)
    if (isinstance(child, MapBlocks) and isinstance(child.transform, FilterFn)
            and child.transform.expr is not None
            and reads_only(child.transform.expr, columns)):
        return dataclasses.replace(child, input=MapBlocks(child.input, op.transform))
    return None
