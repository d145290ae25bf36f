"""Missing values, defined once for every operator.

A value is *missing* when it is null or a floating-point NaN (as in pandas,
where both read as NaN). The rules, the same for one block and for many:

- keys (``sort``, ``groupby``, ``map_groups``, ``unique``): every missing key
  belongs to one group; missing keys sort last, ascending and descending
  (pandas' ``na_position="last"``), and keep their input order (the sort is stable);
- aggregates skip missing values: ``count(col)`` counts the present ones,
  ``sum`` of none is 0, ``mean``/``min``/``max``/``std`` of none are null
  (pandas' ``skipna`` with ``dropna=False`` grouping);
- a group key that was NaN comes back as null.

>>> import pyarrow as pa
>>> missing_as_null(pa.chunked_array([[1.0, float("nan"), None]])).to_pylist()
[1.0, None, None]
>>> sort_indices(pa.table({"k": [2.0, None, float("nan"), 1.0]}), ["k"], descending=True).to_pylist()
[0, 3, 1, 2]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["is_missing", "missing_as_null", "with_missing_as_null", "sort_indices", "key_changes"]


def is_missing(values: Any) -> Any:
    """A boolean array: true where ``values`` is null or NaN."""
    return pc.is_null(values, nan_is_null=True)


def missing_as_null(values: Any) -> Any:
    """``values`` with NaN replaced by null (other types unchanged)."""
    if pa.types.is_floating(values.type):
        return pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
    return values


def with_missing_as_null(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``table`` with NaN turned into null in ``columns`` (the others untouched)."""
    for name in columns:
        column = table.column(name)
        if pa.types.is_floating(column.type) and column.null_count < len(column):
            table = table.set_column(table.schema.get_field_index(name), name, missing_as_null(column))
    return table


def sort_indices(table: pa.Table, keys: Sequence[str], descending: bool | Sequence[bool]) -> pa.Array:
    """Row order of ``table`` sorted by ``keys`` (``descending``: for all keys, or one per key).

    Stable, and missing keys last in both directions.
    """
    flags = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
    normalized = with_missing_as_null(table.select(list(keys)), keys)
    order = [(k, "descending" if d else "ascending") for k, d in zip(keys, flags, strict=True)]
    return pc.sort_indices(normalized, sort_keys=order)  # Arrow puts nulls at the end


def key_changes(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """For rows sorted by ``keys``: true where a row starts a new group (missing keys equal each other)."""
    n = table.num_rows
    change = np.zeros(n, dtype=bool)
    if n == 0:
        return change
    change[0] = True
    for name in keys:
        column = missing_as_null(table.column(name))
        current, previous = column.slice(1), column.slice(0, n - 1)
        missing_now = is_missing(current).to_numpy(zero_copy_only=False)
        missing_before = is_missing(previous).to_numpy(zero_copy_only=False)
        equal = pc.fill_null(pc.equal(current, previous), False).to_numpy(zero_copy_only=False)
        same = equal | (missing_now & missing_before)
        change[1:] |= ~same
    return change
