"""Push an expression filter into the reader (row groups skipped by their statistics).

``filter(expr=...)`` directly above a reader that supports filters becomes the
reader's ``filter``, combined with one it already has. Function filters stay
where they are: their columns are not known.
"""

from __future__ import annotations

import re

from ..logical.operators import LogicalOp, MapBlocks, Read
from ..transforms import FilterFn

_FIELD = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)(?![\w(])")
_NOT_FIELDS = re.compile(r"\{[^{}]*\}|\"(?:[^\"\\]|\\.)*\"")  # a function's options, a string literal
_WORDS = {"and", "or", "not", "true", "false", "null", "is_null", "is_valid", "invert"}


def expression_fields(expr: object) -> set[str]:
    """Column names an expression reads (from its text form, which names fields bare), less the words of
    function options (``cast(1.5, {to_type=double, ...})``) and of string literals."""
    return {m for m in _FIELD.findall(_NOT_FIELDS.sub(" ", str(expr))) if m not in _WORDS}


def rule(op: LogicalOp) -> LogicalOp | None:
    if not (isinstance(op, MapBlocks) and isinstance(op.transform, FilterFn) and op.transform.expr is not None):
        return None
    child = op.input
    if not (isinstance(child, Read) and child.source.supports_filter and child.limit is None):
        return None
    if child.columns is not None and not expression_fields(op.transform.expr) <= set(child.columns):
        return None
    combined = op.transform.expr if child.filter is None else child.filter & op.transform.expr
    return Read(child.source, child.columns, combined, child.limit)
