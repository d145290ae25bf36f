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
from .files import FileSink, FileSource
from .parquet import ReadError

__all__ = ["JSONSource", "JSONSink"]

SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")


class JSONSource(FileSource):
    """JSON lines files (``.json``, ``.jsonl``, and their ``.gz``)."""

    name = "json"
    suffixes = SUFFIXES

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        path = task.payload
        try:
            with self.fs.open(path, "rb", compression="infer") as f:
                data = f.read()
            if not data.strip():
                return
            table = pajson.read_json(pa.BufferReader(data))
        except (OSError, EOFError, pa.ArrowException) as exc:
            raise ReadError(f"cannot read JSON lines file {path!r}: {exc}") from exc
        yield table



@dataclass
class JSONSink(FileSink):
    """Writes one JSON lines file per block under ``path`` (a folder, local or fsspec URL)."""

    name: str = "json"
    suffix: ClassVar[str] = "jsonl"

    def write_file(self, fs: Any, target: str, block: pa.Table) -> None:
        text = block.to_pandas().to_json(orient="records", lines=True, date_format="iso") if block.num_rows else ""
        with fs.open(target, "w", encoding="utf-8") as f:
            f.write(text)
