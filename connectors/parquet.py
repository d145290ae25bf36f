"""Parquet files: local paths, folders, globs, fsspec URLs; columns and filters pushed down.

One read task per file. Filters are pyarrow expressions; pyarrow's dataset
reader uses row-group statistics to skip row groups that cannot match.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from airflowless.errors import AirflowlessError

from .base import Datasource, ReadTask
from .files import FileSink
from .paths import expand_paths

__all__ = ["ParquetSource", "ParquetSink", "ReadError"]


class ReadError(AirflowlessError, ValueError):
    """A file could not be read as expected; names the file."""


class ParquetSource(Datasource):
    name = "parquet"
    supports_projection = True
    supports_filter = True

    def __init__(self, paths: str | Sequence[str], *, storage_options: dict[str, Any] | None = None) -> None:
        self.paths = paths
        self.storage_options = storage_options or {}
        self.fs, self.files = expand_paths(paths, suffixes=(".parquet", ".parq", ".pq"),
                                           storage_options=self.storage_options)
        self._schema: pa.Schema | None = None

    def task_reader(self) -> ParquetSource:
        """What read tasks carry: this source without its file list (each task names its file)."""
        light = copy.copy(self)
        light.files = []
        light.paths = ()
        return light

    def schema(self) -> pa.Schema:
        if self._schema is None:
            try:
                self._schema = pq.read_schema(self.files[0], filesystem=self.fs)
            except Exception as exc:
                raise ReadError(f"cannot read the parquet schema of {self.files[0]!r}: {exc}") from exc
        return self._schema

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        schema = self.schema()
        for column in columns or ():
            if column not in schema.names:
                raise ReadError(
                    f"column {column!r} is not in the parquet data at {self.paths!r}; "
                    f"its columns are {schema.names}"
                )
        return [ReadTask(name=f, payload=(f, schema)) for f in self.files]

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        import pyarrow.dataset as pads  # here, not at the top: it imports pandas (0.3 s), which planning never needs

        path, expected = task.payload
        try:
            fragment = pads.dataset(path, format="parquet", filesystem=self.fs)
            if fragment.schema.names != expected.names or not fragment.schema.equals(expected):
                _check_schema(path, fragment.schema, expected, columns)
            table = fragment.to_table(columns=list(columns) if columns else expected.names, filter=filter)
        except ReadError:
            raise
        except (OSError, pa.ArrowInvalid) as exc:
            raise ReadError(f"cannot read parquet file {path!r}: {exc}") from exc
        yield table

    def describe(self) -> str:
        return f"parquet[{len(self.files)} files]"


def _check_schema(path: str, got: pa.Schema, expected: pa.Schema, columns: Sequence[str] | None) -> None:
    """Every file has the first file's columns and types (only ``columns``, when the read selects some)."""
    wanted = list(columns) if columns else expected.names
    missing = [n for n in wanted if n not in got.names]
    extra = [] if columns else [n for n in got.names if n not in expected.names]
    changed = [f"{n}: {expected.field(n).type} -> {got.field(n).type}" for n in wanted
               if n in got.names and n in expected.names and not got.field(n).type.equals(expected.field(n).type)]
    if missing or extra or changed:
        raise ReadError(
            f"parquet file {path!r} does not match the schema of the first file: expected columns "
            f"{expected.names}; missing columns {missing}, extra columns {extra}, changed types {changed}. Read "
            "files with different columns separately (and union them), or pass columns=[...] that every file has"
        )


@dataclass
class ParquetSink(FileSink):
    """Writes one parquet file per block under ``path`` (a folder, local or fsspec URL)."""

    name: str = "parquet"
    suffix: ClassVar[str] = "parquet"

    def write_file(self, fs: Any, target: str, block: pa.Table) -> None:
        with fs.open(target, "wb") as f:
            pq.write_table(block, f)
