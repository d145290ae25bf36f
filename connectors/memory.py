"""In-memory sources: pandas, arrow, numpy, Python items, ranges, Dask DataFrames."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from airflowless.errors import ConfigError

from .base import Datasource, ReadTask

__all__ = ["TablesSource", "RangeSource", "DaskSource"]


class TablesSource(Datasource):
    """Tables already made on the driver; each becomes one block (shipped with its task)."""

    name = "memory"

    def __init__(self, tables: Sequence[pa.Table], name: str = "memory") -> None:
        self.tables = list(tables)
        self.name = name

    def schema(self) -> pa.Schema | None:
        return self.tables[0].schema if self.tables else None

    def task_reader(self) -> TablesSource:
        return TablesSource([], self.name)  # each task carries its own table

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        return [ReadTask(f"{self.name}[{i}]", t, rows=t.num_rows, size_bytes=t.nbytes)
                for i, t in enumerate(self.tables)]

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        yield task.payload


class RangeSource(Datasource):
    """Integers ``0..n-1`` in a column ``id``, made on the workers."""

    name = "range"

    def __init__(self, n: int, parallelism: int) -> None:
        if n < 0:
            raise ConfigError(f"range needs n >= 0, got {n}")
        self.n = n
        self.parallelism = max(1, min(parallelism, n or 1))

    def schema(self) -> pa.Schema:
        return pa.schema([("id", pa.int64())])

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        step = -(-self.n // self.parallelism) if self.n else 0
        bounds = [(s, min(s + step, self.n)) for s in range(0, self.n, step)] if step else []
        return [ReadTask(f"range[{a}:{b}]", (a, b), rows=b - a) for a, b in bounds]

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        import numpy as np

        start, stop = task.payload
        yield pa.table({"id": np.arange(start, stop, dtype=np.int64)})


class DaskSource(Datasource):
    """The partitions of a Dask DataFrame; each partition is computed on a worker."""

    name = "dask"

    def __init__(self, frame: Any) -> None:
        self.frame = frame

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        parts = self.frame.to_delayed()
        return [ReadTask(f"dask[{i}]", part) for i, part in enumerate(parts)]

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        frame = task.payload.compute(scheduler="sync")
        yield pa.Table.from_pandas(frame, preserve_index=False)


class SubsetSource(Datasource):
    """Every ``step``-th read task of another source, starting at ``offset`` (one part of a split)."""

    def __init__(self, source: Datasource, offset: int, step: int) -> None:
        self.source, self.offset, self.step = source, offset, step
        self.name = source.name
        self.supports_projection = source.supports_projection
        self.supports_filter = source.supports_filter

    def schema(self) -> pa.Schema | None:
        return self.source.schema()

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        tasks = self.source.plan(columns=columns, filter=filter, parallelism=parallelism)
        return tasks[self.offset::self.step]

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        return self.source.read(task, columns=columns, filter=filter)

    def task_reader(self) -> Datasource:
        return self.source.task_reader()
