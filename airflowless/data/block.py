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

from ..errors import AirflowlessError, ConfigError

__all__ = ["Block", "BatchFormat", "BATCH_FORMATS", "to_batch", "from_batch", "tensor_array", "concat", "rebatch",
           "numpy_batches", "BatchTypeError", "SchemaMismatchError"]

Block = pa.Table
BatchFormat = Literal["pandas", "pyarrow", "numpy"]
BATCH_FORMATS: tuple[str, ...] = ("pandas", "pyarrow", "numpy")


class BatchTypeError(AirflowlessError, TypeError):
    """A batch function returned something that is not a batch."""


class SchemaMismatchError(AirflowlessError, TypeError):
    """Blocks whose column types cannot be unified met in one table."""


def check_format(batch_format: str) -> str:
    """``batch_format`` if it is one (Ray's ``"default"`` is ``"numpy"``); ConfigError otherwise."""
    if batch_format == "default":
        return "numpy"
    if batch_format not in BATCH_FORMATS:
        raise ConfigError(f"batch_format must be one of {list(BATCH_FORMATS)}, got {batch_format!r}")
    return batch_format


def to_batch(table: pa.Table, batch_format: str) -> Any:
    """The block as a pandas DataFrame, a pyarrow Table, or a dict of numpy arrays.

    A tensor column (Arrow fixed-size lists, see :func:`tensor_array`) is one
    ``(rows, *shape)`` numpy array in numpy batches, and holds one
    ``shape`` array per row in pandas batches.
    """
    if batch_format == "pyarrow":
        return table
    if batch_format == "pandas":
        frame = table.to_pandas()
        for name in table.column_names:
            if pa.types.is_fixed_size_list(table.schema.field(name).type):
                tensor = _tensor_to_numpy(table.column(name))
                if tensor is not None and tensor.ndim > 2:  # Arrow gives arrays of arrays: one array per row
                    cells = np.empty(len(tensor), dtype=object)
                    cells[:] = list(tensor)
                    frame[name] = cells
        return frame
    if batch_format in ("numpy", "default"):
        return {name: _column_to_numpy(table.column(name)) for name in table.column_names}
    raise ConfigError(f"batch_format must be one of {list(BATCH_FORMATS)}, got {batch_format!r}")


def tensor_array(array: np.ndarray) -> pa.Array:
    """A column of ``array.shape[1:]``-shaped tensors, one per row: nested Arrow fixed-size lists.

    >>> tensor_array(np.arange(6).reshape(3, 2)).type
    FixedSizeListType(fixed_size_list<item: int64>[2])
    """
    column: pa.Array = pa.array(np.ascontiguousarray(array).reshape(-1))
    for size in reversed(array.shape[1:]):
        column = pa.FixedSizeListArray.from_arrays(column, size)
    return column


def _tensor_to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A fixed-size list column as one ``(rows, *shape)`` array; None if an entry is null."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    shape = [len(values)]
    while pa.types.is_fixed_size_list(values.type):
        if values.null_count:
            return None
        shape.append(values.type.list_size)
        values = values.flatten()
    return values.to_numpy(zero_copy_only=False).reshape(shape)


def _column_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_fixed_size_list(column.type):
        tensor = _tensor_to_numpy(column)
        if tensor is not None:
            return tensor
    view = _view(column) if not pa.types.is_boolean(column.type) else _booleans(column)
    if view is not None:
        return view
    try:
        return column.to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return np.asarray(column.to_pylist(), dtype=object)


def _stacked(values: Any) -> np.ndarray | None:
    """Equal-shape numpy arrays (a list, or an object array of them) stacked into one array; else None."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values if values.ndim > 1 else None
    if not isinstance(values, (list, np.ndarray)) or len(values) == 0:
        return None
    first = values[0]
    if not isinstance(first, np.ndarray) or first.ndim == 0 or first.dtype == object:
        return None
    if not all(isinstance(v, np.ndarray) and v.shape == first.shape for v in values):
        return None
    return np.stack(list(values))


def from_batch(batch: Any, *, where: str) -> pa.Table:
    """A block from what a batch function returned; a clear error naming ``where`` otherwise.

    A multi-dimensional numpy array, or a column of equal-shape arrays (numpy
    or pandas), becomes a tensor column (see :func:`tensor_array`).
    """
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
            return _from_pandas(batch)
    raise BatchTypeError(
        f"{where} returned {type(batch).__name__}; a batch function must return a pandas DataFrame, "
        "a pyarrow Table, or a dict of column name -> numpy array/list"
    )


def _from_pandas(frame: Any) -> pa.Table:
    tensors = {}
    for name in frame.columns:
        if frame[name].dtype == object:
            stacked = _stacked(frame[name].to_numpy())
            if stacked is not None:
                tensors[name] = stacked
    if not tensors:
        return pa.Table.from_pandas(frame, preserve_index=False)
    rest = pa.Table.from_pandas(frame.drop(columns=list(tensors)), preserve_index=False)
    arrays = [tensor_array(tensors[name]) if name in tensors else rest.column(str(name)) for name in frame.columns]
    return pa.Table.from_arrays(arrays, names=[str(n) for n in frame.columns], metadata=rest.schema.metadata)


def _to_array(value: Any) -> Any:
    stacked = _stacked(value)
    return tensor_array(stacked) if stacked is not None else value


def concat(tables: list[pa.Table]) -> pa.Table:
    """Tables stacked; schemas are unified where Arrow can (null -> any type, int -> float).

    Raises :class:`SchemaMismatchError` naming the column when two blocks
    hold types that cannot be unified (e.g. an int column that is text in
    another file).
    """
    tables = [t for t in tables if t is not None]
    if not tables:
        return pa.table({})
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        raise SchemaMismatchError(
            f"blocks with different schemas cannot be combined: {exc}. Expected every block to have the same "
            "column types; cast the column (map_batches, or convert_options=pyarrow.csv.ConvertOptions("
            "column_types=...) for CSV) or read the sources separately") from exc


def rebatch(tables: Iterator[pa.Table], batch_size: int | None, *, drop_last: bool = False) -> Iterator[pa.Table]:
    """Tables re-cut into ``batch_size`` rows (the last may be short); ``None`` keeps the blocks."""
    if batch_size is None:
        for table in tables:
            if table.num_rows:
                yield table
        return
    for pieces in _cuts(tables, batch_size, drop_last):
        yield _joined(pieces)


def _cuts(tables: Iterator[pa.Table], batch_size: int, drop_last: bool) -> Iterator[list[tuple[pa.Table, int, int]]]:
    """Each batch of ``batch_size`` rows across ``tables``, as its pieces: (table, first row, rows)."""
    held: list[tuple[pa.Table, int, int]] = []
    rows = 0
    for table in tables:
        offset = 0
        while offset < table.num_rows:
            take = min(batch_size - rows, table.num_rows - offset)
            held.append((table, offset, take))
            rows += take
            offset += take
            if rows == batch_size:
                yield held
                held, rows = [], 0
    if rows and not drop_last:
        yield held


def _joined(pieces: list[tuple[pa.Table, int, int]]) -> pa.Table:
    return concat([table.slice(first, rows) for table, first, rows in pieces]).combine_chunks()


def numpy_batches(tables: Iterator[pa.Table], batch_size: int, *, drop_last: bool = False) -> Iterator[dict[str, Any]]:
    """What ``to_batch(t, "numpy")`` gives for each ``t`` of ``rebatch(tables, batch_size)``, made faster.

    A column numpy can view without a copy (one chunk of numbers or times, no
    nulls) is viewed once per block, and a batch inside the block takes a slice
    of that view: a few hundred nanoseconds instead of a conversion per batch.
    The other columns, and the batches that straddle two blocks, are converted
    as :func:`rebatch` cuts them, so every batch is the same as before.
    """
    viewed: tuple[pa.Table, dict[str, np.ndarray | None], pa.Table] | None = None  # the block, its views, the rest
    for pieces in _cuts(tables, batch_size, drop_last):
        if len(pieces) > 1:
            yield to_batch(_joined(pieces), "numpy")
            continue
        table, first, rows = pieces[0]
        if viewed is None or viewed[0] is not table:
            views = {name: _view(table.column(name)) for name in table.column_names}
            viewed = (table, views, table.select([name for name, view in views.items() if view is None]))
        _, views, rest = viewed
        converted = to_batch(rest.slice(first, rows).combine_chunks(), "numpy") if rest.num_columns else {}
        yield {name: view[first:first + rows] if view is not None else converted[name] for name, view in views.items()}


def _view(column: pa.ChunkedArray) -> np.ndarray | None:
    """``column`` as a read-only numpy view of its one chunk, or None where that would take a copy.

    Made by numpy from the values buffer, as ``to_numpy(zero_copy_only=True)``
    would make it: pyarrow's conversion imports pandas (0.3 s in a fresh
    process) even for an int64 view, which a driver iterating numpy batches
    never needs otherwise.
    """
    kind = column.type
    if column.num_chunks != 1 or column.null_count:
        return None
    if pa.types.is_integer(kind):
        dtype = np.dtype(str(kind))
    elif pa.types.is_floating(kind):
        dtype = np.dtype(f"float{kind.bit_width}")
    elif pa.types.is_timestamp(kind):
        dtype = np.dtype(f"datetime64[{kind.unit}]")
    elif pa.types.is_duration(kind):
        dtype = np.dtype(f"timedelta64[{kind.unit}]")
    else:
        return None
    chunk = column.chunk(0)
    values = chunk.buffers()[1]
    view = np.empty(0, dtype) if values is None else \
        np.frombuffer(values, dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)
    view.flags.writeable = False
    return view


def _booleans(column: pa.ChunkedArray) -> np.ndarray | None:
    """A boolean column of one chunk without nulls as numpy booleans, its bits unpacked by numpy (see :func:`_view`)."""
    if column.num_chunks != 1 or column.null_count:
        return None
    chunk = column.chunk(0)
    bits = chunk.buffers()[1]
    if bits is None:
        return np.empty(0, bool)
    skip = chunk.offset % 8  # bits of the first byte before the slice starts
    byte = np.frombuffer(bits, np.uint8, offset=chunk.offset // 8)
    return np.unpackbits(byte, count=skip + len(chunk), bitorder="little")[skip:].view(bool)
