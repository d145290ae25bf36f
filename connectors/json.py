"""JSON lines files (one object per line): paths, folders, globs, fsspec URLs; gzip by suffix.

One read task per file, parsed with ``pyarrow.json``; an empty file is zero
rows. The sink writes one ``part-{index:05d}.jsonl`` per block with pandas
(timestamps as ISO 8601 strings, which read back as strings).

>>> import pyarrow as pa, tempfile
>>> folder = tempfile.mkdtemp()
>>> JSONSink(folder).write(pa.table({"x": [1, 2]}), 0).rows
2
>>> source = JSONSource(folder)
>>> [t.to_pylist() for task in source.plan() for t in source.read(task)]
[[{'x': 1}, {'x': 2}]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.json as pajson

from .base import ReadTask
from .files import FileSink, FileSource, same_columns
from .parquet import ReadError

__all__ = ["JSONSource", "JSONSink"]

SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")


class JSONSource(FileSource):
    """JSON lines files (``.json``, ``.jsonl``, and their ``.gz``)."""

    name = "json"
    supports_projection = True
    suffixes = SUFFIXES

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        path, expected, first = task.payload
        table = self._read_file(path)
        if table is None:
            return
        if columns:
            missing = [c for c in columns if c not in table.column_names]
            if missing:
                raise ReadError(f"JSON lines file {path!r} has no column(s) {missing}; its columns are "
                                f"{table.column_names}")
            yield table.select(list(columns))
            return
        yield same_columns(path, table, expected, first, "JSON lines")

    def read_columns(self, path: str) -> list[str]:
        table = self._read_file(path)
        return [] if table is None else list(table.column_names)

    def _read_file(self, path: str) -> pa.Table | None:
        try:
            with self.fs.open(path, "rb", compression="infer") as f:
                data = f.read()
            if not data.strip():
                return None
            return pajson.read_json(pa.BufferReader(data))
        except (OSError, EOFError, pa.ArrowException) as exc:
            raise ReadError(f"cannot read JSON lines file {path!r}: {exc}") from exc



@dataclass
class JSONSink(FileSink):
    """Writes one JSON lines file per block under ``path`` (a folder, local or fsspec URL)."""

    name: str = "json"
    suffix: ClassVar[str] = "jsonl"

    def write_file(self, fs: Any, target: str, block: pa.Table) -> None:
        text = block.to_pandas().to_json(orient="records", lines=True, date_format="iso") if block.num_rows else ""
        with fs.open(target, "w", encoding="utf-8") as f:
            f.write(text)
