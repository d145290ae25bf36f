"""Exact quantiles of a Dataset column, computed on the cluster: a sort, then a few rows.

>>> from airflowless.data.preprocessors.quantiles import percentiles
>>> percentiles(data.from_pandas(pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0]})), "x", [25, 50])  # doctest: +SKIP
[1.75, 2.5]

Why this way: scikit-learn's ``RobustScaler`` uses ``numpy.nanpercentile``
(linear interpolation between the two order statistics around
``q/100 * (n - 1)``). To give the same numbers, not an approximation of them,
we need those exact order statistics. The Dataset's distributed sample sort
orders one projected column on the workers (O(n log n) work spread over the
blocks; the driver sees only the sort's key samples), the sorted blocks are
kept on the cluster, and then only the one or two rows each percentile needs
are sliced out and fetched. The cost is one shuffle of a single column per
column; a mergeable sketch (t-digest, KLL) would avoid the shuffle but only
approximates the quantiles, and would not match scikit-learn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from ..dataset import Dataset

__all__ = ["percentiles"]


def percentiles(ds: Dataset, column: str, qs: Sequence[float]) -> list[float]:
    """The ``qs`` percentiles (0..100) of ``column``, ignoring nulls and NaN, like ``numpy.nanpercentile``.

    NaN for every ``q`` when the column has no value.
    """
    values = ds.select_columns([column]).map_batches(
        _non_missing_floats, batch_format="pyarrow", fn_kwargs={"column": column})
    ordered = values.sort(column).materialize()
    n = ordered.count()
    if n == 0:
        return [math.nan for _ in qs]
    positions = [q / 100 * (n - 1) for q in qs]
    needed = sorted({math.floor(p) for p in positions} | {min(math.floor(p) + 1, n - 1) for p in positions})
    at = _values_at(ordered, column, needed)
    out = []
    for p in positions:
        below = math.floor(p)
        out.append(_lerp(at[below], at[min(below + 1, n - 1)], p - below))
    return out


def _non_missing_floats(table: pa.Table, column: str) -> pa.Table:
    """The column as float64 without nulls and NaN (runs on the workers)."""
    values = table.column(column).cast(pa.float64())
    keep = pc.fill_null(pc.invert(pc.is_nan(values)), False)
    return pa.table({column: values.filter(keep)})


def _values_at(ordered: Dataset, column: str, indices: list[int]) -> dict[int, float]:
    """The values at sorted row ``indices``: each row is sliced out on the workers, then fetched."""
    bounds = sorted(set(indices) | {i + 1 for i in indices})
    pieces = ordered.split_at_indices(bounds)  # piece k + 1 holds rows [bounds[k], bounds[k + 1])
    picked = [pieces[bounds.index(i) + 1] for i in indices]
    rows = picked[0].union(*picked[1:]).take_all()
    return {i: float(row[column]) for i, row in zip(indices, rows, strict=True)}


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's linear interpolation, written the same way so the results match bit for bit."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t
