"""CSV files: local paths, folders, globs, fsspec URLs; gzip by suffix; columns pushed down.

One read task per file, parsed with ``pyarrow.csv`` (types inferred per file;
pass ``convert_options=pyarrow.csv.ConvertOptions(column_types=...)`` to fix
them). The sink writes one ``part-{index:05d}.csv`` per block.

>>> import pyarrow as pa, tempfile
>>> folder = tempfile.mkdtemp()
>>> CSVSink(folder).write(pa.table({"x": [1, 2]}), 0).rows
2
>>> source = CSVSource(folder)
>>> [t.num_rows for task in source.plan() for t in source.read(task)]
[2]
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.csv as pacsv

from airflowless.errors import UsageError

from .base import ReadTask
from .files import FileSink, FileSource, same_columns
from .parquet import ReadError

__all__ = ["CSVSource", "CSVSink"]

SUFFIXES = (".csv", ".csv.gz")
ARROW_ARGS = ("read_options", "parse_options", "convert_options")


class CSVSource(FileSource):
    """CSV files (``.csv``, ``.csv.gz``); ``arrow_csv_args`` go to :func:`pyarrow.csv.read_csv`.

    >>> import pyarrow.csv as pacsv
    >>> CSVSource("data/*.csv", parse_options=pacsv.ParseOptions(delimiter=";"))  # doctest: +SKIP
    """

    name = "csv"
    supports_projection = True
    suffixes = SUFFIXES

    def __init__(self, paths: str | Sequence[str], *, storage_options: dict[str, Any] | None = None,
                 **arrow_csv_args: Any) -> None:
        unknown = sorted(set(arrow_csv_args) - set(ARROW_ARGS))
        if unknown:
            raise UsageError(f"CSV reading takes the pyarrow.csv options {list(ARROW_ARGS)}, got {unknown}")
        super().__init__(paths, storage_options=storage_options)
        self.arrow_csv_args = arrow_csv_args

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        path, expected, first = task.payload
        args = dict(self.arrow_csv_args)
        if columns:
            convert = copy.copy(args.get("convert_options") or pacsv.ConvertOptions())
            convert.include_columns = list(columns)
            args["convert_options"] = convert
        try:
            with self.fs.open(path, "rb", compression="infer") as f:
                table = pacsv.read_csv(f, **args)
        except (OSError, EOFError, pa.ArrowException) as exc:
            raise ReadError(f"cannot read CSV file {path!r}: {exc}") from exc
        if not columns:
            table = same_columns(path, table, expected, first, "CSV")
        yield table

    def read_columns(self, path: str) -> list[str]:
        try:
            with self.fs.open(path, "rb", compression="infer") as f:
                return list(pacsv.open_csv(f, **self.arrow_csv_args).schema.names)  # the first block only
        except (OSError, EOFError, pa.ArrowException) as exc:
            raise ReadError(f"cannot read CSV file {path!r}: {exc}") from exc



@dataclass
class CSVSink(FileSink):
    """Writes one CSV file (with a header) per block under ``path`` (a folder, local or fsspec URL)."""

    name: str = "csv"
    suffix: ClassVar[str] = "csv"

    def write_file(self, fs: Any, target: str, block: pa.Table) -> None:
        with fs.open(target, "wb") as f:
            pacsv.write_csv(block, f)
