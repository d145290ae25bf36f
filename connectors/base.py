"""The connector interface: plan read tasks, read one task into blocks, write one block.

A :class:`Datasource` turns a description of data (paths, a query, a frame)
into :class:`ReadTask` s, each of which a worker runs to produce blocks
(``pyarrow.Table``). A :class:`Datasink` writes one block per task and is told
when all are written. Both are plain picklable objects: they travel to the
workers inside the tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = ["ReadTask", "Datasource", "Datasink", "WriteResult"]


@dataclass(frozen=True)
class ReadTask:
    """One unit of reading: ``source.read_task(self)`` on a worker yields its blocks.

    ``rows`` and ``size_bytes`` are estimates known at planning time (or None);
    ``name`` says what is read (a file, a query range) for errors and stats.
    """

    name: str
    payload: Any
    rows: int | None = None
    size_bytes: int | None = None


class Datasource:
    """Where a dataset's rows come from.

    Lifecycle: the driver calls :meth:`plan` (cheap: listing, metadata), then
    each :class:`ReadTask` travels to a worker, which calls :meth:`read`.
    ``columns`` and ``filter`` are pushed down by the optimizer only when
    :attr:`supports_projection` / :attr:`supports_filter` are true.
    """

    name: str = "source"
    supports_projection: bool = False
    supports_filter: bool = False

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        raise NotImplementedError

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        raise NotImplementedError

    def schema(self) -> pa.Schema | None:
        """The schema, if it is known without reading data."""
        return None

    def task_reader(self) -> Datasource:
        """The object read tasks carry to call :meth:`read` (override to leave big planning state behind)."""
        return self

    def describe(self) -> str:
        return self.name


@dataclass
class WriteResult:
    """What one write task reports back: where it wrote and how much."""

    path: str | None
    rows: int
    size_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Datasink:
    """Where a dataset's rows go: :meth:`write` runs on workers, one block per call."""

    name: str = "sink"

    def prepare(self) -> None:
        """Runs on the driver before any block is written (create the folder, the table)."""

    def write(self, block: pa.Table, task_index: int) -> WriteResult:
        raise NotImplementedError

    def on_complete(self, results: list[WriteResult]) -> None:
        """Runs on the driver once every block is written."""
