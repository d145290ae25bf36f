"""Making Datasets: ``read_*`` from storage, ``from_*`` from memory, ``range``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from .dataset import Dataset
from .logical import operators as lo

__all__ = ["read_parquet", "read_csv", "read_json", "read_sql", "read_datasource", "from_pandas",
           "from_arrow", "from_numpy", "from_items", "from_dask", "range"]


def read_datasource(source: Any, *, columns: Sequence[str] | None = None, filter: Any = None) -> Dataset:
    ds = Dataset(lo.Read(source))
    if filter is not None:
        ds = ds.filter(expr=filter)
    if columns is not None:
        ds = ds.select_columns(columns)
    return ds


def read_parquet(paths: str | Sequence[str], *, columns: Sequence[str] | None = None, filter: Any = None,
                 storage_options: dict[str, Any] | None = None) -> Dataset:
    """Parquet files: a path, a folder, a glob, a list, or fsspec URLs (``s3://...``).

    ``columns`` and ``filter`` (a pyarrow expression, e.g. ``col("x") > 0``) are
    applied in the reader: unread columns and row groups are skipped.
    """
    from connectors import get_source

    return read_datasource(get_source("parquet")(paths, storage_options=storage_options),
                           columns=columns, filter=filter)


def read_csv(paths: str | Sequence[str], *, columns: Sequence[str] | None = None,
             storage_options: dict[str, Any] | None = None, **arrow_args: Any) -> Dataset:
    """CSV files (``.csv``, ``.csv.gz``): a path, a folder, a glob, a list, or fsspec URLs.

    ``columns`` are the only ones parsed; ``arrow_args`` (``read_options``,
    ``parse_options``, ``convert_options``) go to :func:`pyarrow.csv.read_csv`.

    >>> ds = read_csv("data/trips/*.csv", columns=["trip_distance"])  # doctest: +SKIP
    """
    from connectors import get_source

    return read_datasource(get_source("csv")(paths, storage_options=storage_options, **arrow_args),
                           columns=columns)


def read_json(paths: str | Sequence[str], *, columns: Sequence[str] | None = None,
              storage_options: dict[str, Any] | None = None) -> Dataset:
    """JSON lines files (``.json``, ``.jsonl``, gzipped too): one object per line.

    Every file must have the columns of the first one, unless ``columns``
    names the ones to keep (every file must have those).

    >>> ds = read_json("s3://bucket/events/", storage_options={"anon": True})  # doctest: +SKIP
    """
    from connectors import get_source

    return read_datasource(get_source("json")(paths, storage_options=storage_options), columns=columns)


def read_text(paths: str | Sequence[str], *, encoding: str = "utf-8", drop_empty_lines: bool = True,
              include_paths: bool = False, file_extensions: Sequence[str] | None = None,
              storage_options: dict[str, Any] | None = None) -> Dataset:
    """Each line of text files as a row of ``text`` (one block per file; compressed files by their suffix).

    Blank lines are dropped unless ``drop_empty_lines=False``; ``include_paths``
    adds each row's file as ``path``; ``file_extensions=["txt"]`` keeps only
    those files of a folder or glob (every file, by default).

    >>> ds = read_text("s3://bucket/logs/", file_extensions=["log"])  # doctest: +SKIP
    """
    from connectors import get_source

    return read_datasource(get_source("text")(paths, encoding=encoding, drop_empty_lines=drop_empty_lines,
                                              include_paths=include_paths, file_extensions=file_extensions,
                                              storage_options=storage_options))


def read_binary_files(paths: str | Sequence[str], *, include_paths: bool = False,
                      file_extensions: Sequence[str] | None = None,
                      storage_options: dict[str, Any] | None = None) -> Dataset:
    """Each file as one row of ``bytes``, as it is on disk (``include_paths`` adds ``path``).

    >>> ds = read_binary_files("data/images/", include_paths=True, file_extensions=["png"])  # doctest: +SKIP
    """
    from connectors import get_source

    return read_datasource(get_source("binary")(paths, include_paths=include_paths,
                                                file_extensions=file_extensions, storage_options=storage_options))


def read_sql(sql: str, connection_url: str, *, parallelism: int | None = None,
             partition_column: str | None = None) -> Dataset:
    """The rows of a query, read with SQLAlchemy (``postgresql://`` uses psycopg 3).

    With ``partition_column`` (a numeric or date column), ``parallelism``
    tasks each read one range of its values; without it, one task reads all.

    >>> ds = read_sql("SELECT * FROM trips", "postgresql://u@db/x",
    ...               parallelism=4, partition_column="trip_id")  # doctest: +SKIP
    """
    from connectors import get_source

    return read_datasource(get_source("sql")(sql, connection_url, parallelism=parallelism,
                                             partition_column=partition_column))


def _tables(name: str, tables: list[pa.Table]) -> Dataset:
    from connectors import get_source

    return Dataset(lo.Read(get_source("memory")(tables, name)))


def from_pandas(frames: Any) -> Dataset:
    """A pandas DataFrame (or a list of them, one block each)."""
    items = frames if isinstance(frames, list) else [frames]
    return _tables("pandas", [pa.Table.from_pandas(f, preserve_index=False) for f in items])


def from_arrow(tables: pa.Table | list[pa.Table]) -> Dataset:
    return _tables("arrow", tables if isinstance(tables, list) else [tables])


def from_numpy(arrays: Any, column: str = "data") -> Dataset:
    """A numpy array (or a dict of equal-length arrays), as one block.

    An array of more than one dimension is a tensor column: batches give it
    back with its shape, e.g. ``from_numpy(np.zeros((6, 2))).take_batch()["data"].shape == (6, 2)``.
    """
    import numpy as np

    from .block import from_batch

    items = arrays if isinstance(arrays, dict) else {column: arrays}
    return _tables("numpy", [from_batch({k: np.asarray(v) for k, v in items.items()}, where="from_numpy")])


def from_items(items: list[Any], *, parallelism: int = 1) -> Dataset:
    """Python dicts (or plain values, as column ``item``), split into ``parallelism`` blocks."""
    rows = [i if isinstance(i, dict) else {"item": i} for i in items]
    size = max(1, -(-len(rows) // max(1, parallelism)))
    return _tables("items", [pa.Table.from_pylist(rows[i:i + size]) for i in builtins_range(0, len(rows), size)]
                   or [pa.table({})])


def from_dask(frame: Any) -> Dataset:
    """A Dask DataFrame; each partition becomes a block, computed on a worker."""
    from connectors import get_source

    return Dataset(lo.Read(get_source("dask")(frame)))


def range(n: int, *, parallelism: int = 8) -> Dataset:  # noqa: A001 - the Ray name
    """Integers 0..n-1 in column ``id``."""
    from connectors import get_source

    return Dataset(lo.Read(get_source("range")(n, parallelism)))


builtins_range = __builtins__["range"] if isinstance(__builtins__, dict) else __builtins__.range  # type: ignore[index]
