"""The functions Dask runs on workers for the physical operators.

Each takes and returns blocks (``pyarrow.Table``) or small metadata; none
holds state between calls except the per-process instances of class-based
batch functions (see :mod:`..transforms`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..aggregate import AggregateFn, combine_partials, partial_aggregate
from ..block import concat, from_batch, to_batch
from ..nulls import is_missing, key_changes, missing_as_null, sort_indices
from ..transforms import ColumnNotFoundError, UserCodeError, run_chain

# -- reading and mapping --------------------------------------------------------


def read_block(source: Any, task: Any, columns: Sequence[str] | None, filter: Any, limit: int | None,
               transforms: Sequence[Any]) -> pa.Table:
    """Read one task's data (at most ``limit`` rows) and run the fused transforms on it."""
    tables = list(source.read(task, columns=columns, filter=filter))
    table = concat(tables) if tables else pa.table({})
    if limit is not None and table.num_rows > limit:
        table = table.slice(0, limit)
    return run_chain(table, transforms)


def map_block(table: pa.Table, transforms: Sequence[Any]) -> pa.Table:
    return run_chain(table, transforms)


def num_rows(table: pa.Table) -> int:
    return int(table.num_rows)


def block_meta(table: pa.Table) -> tuple[int, int]:
    return int(table.num_rows), int(table.nbytes)


def schema_of(table: pa.Table) -> pa.Schema:
    return table.schema


def slice_block(table: pa.Table, start: int, stop: int) -> pa.Table:
    return table.slice(start, stop - start)


def gather_slices(*parts: Any) -> pa.Table:
    """``parts`` is (table, start, stop, table, start, stop, ...): the slices stacked."""
    tables = [parts[i].slice(parts[i + 1], parts[i + 2] - parts[i + 1]) for i in range(0, len(parts), 3)]
    return concat(tables).combine_chunks() if tables else pa.table({})


def pick(parts: Sequence[pa.Table], index: int) -> pa.Table:
    return parts[index]


# -- shuffles -------------------------------------------------------------------


def split_random(table: pa.Table, n: int, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    assignment = rng.integers(0, n, table.num_rows)
    return [table.filter(pa.array(assignment == i)) for i in range(n)]


def concat_shuffled(seed: int, *parts: pa.Table) -> pa.Table:
    table = concat(list(parts))
    order = np.random.default_rng(seed).permutation(table.num_rows)
    return table.take(pa.array(order))


def _check_keys(table: pa.Table, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in table.column_names]
    if missing:
        raise ColumnNotFoundError(f"{where}: key column(s) {missing} not found; the data has {table.column_names}")


def split_hash(table: pa.Table, keys: Sequence[str], n: int) -> list[pa.Table]:
    """Rows split into ``n`` parts by a hash of the key columns (equal keys, same part)."""
    _check_keys(table, keys, "hash partition")
    if table.num_rows == 0:
        return [table] * n
    import pandas as pd

    keyed = table.select(list(keys))
    for name in keys:  # equal numbers hash alike whether a block holds them as int or float
        if pa.types.is_integer(keyed.column(name).type) or pa.types.is_floating(keyed.column(name).type):
            keyed = keyed.set_column(keyed.schema.get_field_index(name), name,
                                     missing_as_null(keyed.column(name).cast(pa.float64())))
    frame = keyed.to_pandas()
    hashed = pd.util.hash_pandas_object(frame, index=False).to_numpy() % n
    return [table.filter(pa.array(hashed == i)) for i in range(n)]


def sample_keys(table: pa.Table, keys: Sequence[str], size: int, seed: int) -> pa.Table:
    _check_keys(table, keys, "sort")
    if table.num_rows <= size:
        return table.select(list(keys))
    idx = np.random.default_rng(seed).choice(table.num_rows, size, replace=False)
    return table.select(list(keys)).take(pa.array(np.sort(idx)))


def split_range(table: pa.Table, keys: Sequence[str], bounds: pa.Table, descending: bool) -> list[pa.Table]:
    """Rows split by the sorted ``bounds`` (on the first key) into len(bounds)+1 ranges.

    Ranges are in output order (largest first when ``descending``); rows with a
    missing key go to the last range in both directions.
    """
    _check_keys(table, keys, "sort")
    edges = bounds.column(0).to_numpy(zero_copy_only=False)
    key = table.column(keys[0])
    present = ~is_missing(key).to_numpy(zero_copy_only=False)
    part = np.full(table.num_rows, len(edges))
    values = key.filter(pa.array(present)).to_numpy(zero_copy_only=False)
    if descending:
        part[present] = len(edges) - np.searchsorted(edges, values, side="left")
    else:
        part[present] = np.searchsorted(edges, values, side="right")
    return [table.filter(pa.array(part == i)) for i in range(len(edges) + 1)]


def concat_sorted(keys: Sequence[str], descending: Sequence[bool], *parts: pa.Table) -> pa.Table:
    table = concat(list(parts))
    return table.take(sort_indices(table, keys, descending)) if table.num_rows else table


# -- aggregations ---------------------------------------------------------------


def partial(table: pa.Table, keys: tuple[str, ...], aggs: tuple[AggregateFn, ...]) -> pa.Table:
    return partial_aggregate(table, keys, aggs)


def combine(keys: tuple[str, ...], aggs: tuple[AggregateFn, ...], *partials: pa.Table) -> pa.Table:
    return combine_partials(list(partials), keys, aggs)


def apply_groups(keys: Sequence[str], fn: Any, batch_format: str, *parts: pa.Table) -> pa.Table:
    table = concat(list(parts))
    if table.num_rows == 0:
        return table
    table = table.take(sort_indices(table, keys, descending=False))
    starts = list(np.flatnonzero(key_changes(table, keys))) + [table.num_rows]
    outputs = []
    name = f"map_groups({getattr(fn, '__name__', 'fn')})"
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        try:
            result = fn(to_batch(table.slice(a, b - a), batch_format))
        except Exception as exc:
            raise UserCodeError(f"{name} raised {type(exc).__name__}: {exc}") from exc
        outputs.append(from_batch(result, where=name))
    return concat(outputs)


# -- joins and zips -------------------------------------------------------------

_JOIN_TYPES = {"inner": "inner", "left": "left outer", "right": "right outer", "outer": "full outer"}


def join_parts(left_keys: Sequence[str], right_keys: Sequence[str], how: str, n_left: int,
               *parts: pa.Table) -> pa.Table:
    left = concat(list(parts[:n_left]))
    right = concat(list(parts[n_left:]))
    _check_keys(left, left_keys, "join (left)")
    _check_keys(right, right_keys, "join (right)")
    return left.join(right, keys=list(left_keys), right_keys=list(right_keys),
                     join_type=_JOIN_TYPES[how], right_suffix="_right", coalesce_keys=True)


def zip_blocks(left: pa.Table, right: pa.Table) -> pa.Table:
    for name in right.column_names:
        column = name if name not in left.column_names else f"{name}_1"
        left = left.append_column(column, right.column(name))
    return left


