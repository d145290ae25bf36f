"""What file sources and sinks share: files found by path, folder, glob or URL; a folder of parts written."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from .base import Datasink, Datasource, ReadTask, WriteResult
from .paths import expand_paths

__all__ = ["FileSource", "FileSink", "same_columns"]


class FileSource(Datasource):
    """One read task per file matching ``paths`` (files ending in one of :attr:`suffixes`)."""

    suffixes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, paths: str | Sequence[str], *, storage_options: dict[str, Any] | None = None,
                 suffixes: tuple[str, ...] | None = None) -> None:
        """``suffixes``: the files of a folder or glob to read, in place of the class's :attr:`suffixes`."""
        self.paths = paths
        self.storage_options = storage_options or {}
        self.fs, self.files = expand_paths(paths, suffixes=self.suffixes if suffixes is None else suffixes,
                                           storage_options=self.storage_options)

    _first_columns: list[str] | None = None

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        """One task per file; each carries the columns of the first file, which every file must have."""
        if self._first_columns is None:
            self._first_columns = self.read_columns(self.files[0])
        return [ReadTask(name=f, payload=(f, self._first_columns, self.files[0])) for f in self.files]

    def read_columns(self, path: str) -> list[str]:
        """The column names of one file (read on the driver for the first file only)."""
        raise NotImplementedError

    def task_reader(self) -> FileSource:
        """What read tasks carry: this source without its file list (each task names its file)."""
        light = copy.copy(self)
        light.files = []
        light.paths = ()
        return light

    def describe(self) -> str:
        return f"{self.name}[{len(self.files)} files]"


def same_columns(path: str, table: pa.Table, expected: Sequence[str], first: str, kind: str) -> pa.Table:
    """``table`` with its columns in ``expected`` order; a ``ReadError`` naming ``path`` if the names differ.

    The rule every file reader follows: all files of one read have the columns
    of the first file (in any order). Files are never silently unified: a
    column missing from some files would read as null there.
    """
    from .parquet import ReadError

    if table.column_names == list(expected) or not expected:  # an empty first JSON file names no columns
        return table
    missing = [c for c in expected if c not in table.column_names]
    extra = [c for c in table.column_names if c not in expected]
    if missing or extra:
        raise ReadError(
            f"{kind} file {path!r} does not have the columns of the first file {first!r}: expected "
            f"{list(expected)}, got {table.column_names}; missing columns {missing}, extra columns {extra}. Read files with "
            "different columns separately (and union them), or pass columns=[...] that every file has")
    return table.select(list(expected))


@dataclass
class FileSink(Datasink):
    """Writes block ``i`` to ``<path>/part-<i>.<suffix>``; a new write replaces the parts of an old one."""

    path: str
    storage_options: dict[str, Any] | None = None
    suffix: ClassVar[str] = ""

    def _fs(self) -> tuple[Any, str]:
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.path, **(self.storage_options or {}))
        return fs, root.rstrip("/")

    def prepare(self) -> None:
        fs, root = self._fs()
        fs.makedirs(root, exist_ok=True)
        for old in fs.glob(f"{root}/part-*.{self.suffix}"):
            fs.rm(old)

    def write(self, block: pa.Table, task_index: int) -> WriteResult:
        fs, root = self._fs()
        target = f"{root}/part-{task_index:05d}.{self.suffix}"
        self.write_file(fs, target, block)
        return WriteResult(target, block.num_rows, block.nbytes)

    def write_file(self, fs: Any, target: str, block: pa.Table) -> None:
        raise NotImplementedError
