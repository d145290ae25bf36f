"""Blocks and batches: a block is a ``pyarrow.Table``; batches are what user code sees.

>>> import pyarrow as pa
>>> table = pa.table({"x": [1, 2, 3]})
>>> to_batch(table, "pandas")["x"].tolist()
[1, 2, 3]
>>> from_batch({"x": [4, 5]}, where="example").num_rows
2
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ..errors import AirflowlessError

__all__ = ["Block", "BatchFormat", "BATCH_FORMATS", "to_batch", "from_batch", "concat", "rebatch",
           "BatchTypeError"]

Block = pa.Table
BatchFormat = Literal["pandas", "pyarrow", "numpy"]
BATCH_FORMATS: tuple[str, ...] = ("pandas", "pyarrow", "numpy")


class BatchTypeError(AirflowlessError, TypeError):
    """A batch function returned something that is not a batch."""


def check_format(batch_format: str) -> str:
    if batch_format not in BATCH_FORMATS:
        raise ValueError(f"batch_format must be one of {list(BATCH_FORMATS)}, got {batch_format!r}")
    return batch_format


def to_batch(table: pa.Table, batch_format: str) -> Any:
    """The block as a pandas DataFrame, a pyarrow Table, or a dict of numpy arrays."""
    if batch_format == "pyarrow":
        return table
    if batch_format == "pandas":
        return table.to_pandas()
    if batch_format == "numpy":
        return {name: _column_to_numpy(table.column(name)) for name in table.column_names}
    raise ValueError(f"batch_format must be one of {list(BATCH_FORMATS)}, got {batch_format!r}")


def _column_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    try:
        return column.to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return np.asarray(column.to_pylist(), dtype=object)


def from_batch(batch: Any, *, where: str) -> pa.Table:
    """A block from what a batch function returned; a clear error naming ``where`` otherwise."""
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if isinstance(batch, dict):
        try:
            return pa.table({k: _to_array(v) for k, v in batch.items()})
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
            raise BatchTypeError(f"{where} returned a dict that is not a table of equal-length columns: {exc}") from exc
    module = type(batch).__module__.split(".")[0]
    if module == "pandas":
        import pandas as pd

        if isinstance(batch, pd.DataFrame):
            return pa.Table.from_pandas(batch, preserve_index=False)
    raise BatchTypeError(
        f"{where} returned {type(batch).__name__}; a batch function must return a pandas DataFrame, "
        "a pyarrow Table, or a dict of column name -> numpy array/list"
    )


def _to_array(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.ndim > 1:
        return pa.array(list(value))  # a column of vectors
    return value


def concat(tables: list[pa.Table]) -> pa.Table:
    """Tables stacked; schemas with the same columns are unified (e.g. null-typed columns)."""
    tables = [t for t in tables if t is not None]
    if not tables:
        return pa.table({})
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="default")


def rebatch(tables: Iterator[pa.Table], batch_size: int | None, *, drop_last: bool = False) -> Iterator[pa.Table]:
    """Tables re-cut into ``batch_size`` rows (the last may be short); ``None`` keeps the blocks."""
    if batch_size is None:
        for table in tables:
            if table.num_rows:
                yield table
        return
    held: list[pa.Table] = []
    rows = 0
    for table in tables:
        offset = 0
        while offset < table.num_rows:
            take = min(batch_size - rows, table.num_rows - offset)
            held.append(table.slice(offset, take))
            rows += take
            offset += take
            if rows == batch_size:
                yield concat(held).combine_chunks()
                held, rows = [], 0
    if rows and not drop_last:
        yield concat(held).combine_chunks()
