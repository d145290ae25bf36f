"""Push an expression filter into the reader (row groups skipped by their statistics).

``filter(expr=...)`` directly above a reader that supports filters becomes the
reader's ``filter``, combined with one it already has. Function filters stay
where they are: their columns are not known.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..expressions import columns_read
from ..logical.operators import LogicalOp, MapBlocks, Read
from ..transforms import FilterFn


def rule(op: LogicalOp) -> LogicalOp | None:
    if not (isinstance(op, MapBlocks) and isinstance(op.transform, FilterFn) and op.transform.expr is not None):
        return None
    child = op.input
    if not (isinstance(child, Read) and child.source.supports_filter and child.limit is None):
        return None
    if child.columns is not None and not reads_only(op.transform.expr, child.columns):
        return None  # a column the read drops: keep the error where the user wrote it
    combined = op.transform.expr if child.filter is None else child.filter & op.transform.expr
    return Read(child.source, child.columns, combined, child.limit)


def reads_only(expr: object, columns: Sequence[str]) -> bool:
    """Whether ``expr`` reads no column but ``columns`` (False when its columns cannot be told)."""
    read = columns_read(expr)
    return read is not None and read <= set(columns)
