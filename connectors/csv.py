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

from .base import Datasource, ReadTask
from .files import FileSink
from .parquet import ReadError
from .paths import expand_paths

__all__ = ["CSVSource", "CSVSink"]

SUFFIXES = (".csv", ".csv.gz")
ARROW_ARGS = ("read_options", "parse_options", "convert_options")


class CSVSource(Datasource):
    """CSV files (``.csv``, ``.csv.gz``); ``arrow_csv_args`` go to :func:`pyarrow.csv.read_csv`.

    >>> import pyarrow.csv as pacsv
    >>> CSVSource("data/*.csv", parse_options=pacsv.ParseOptions(delimiter=";"))  # doctest: +SKIP
    """

    name = "csv"
    supports_projection = True

    def __init__(self, paths: str | Sequence[str], *, storage_options: dict[str, Any] | None = None,
                 **arrow_csv_args: Any) -> None:
        unknown = sorted(set(arrow_csv_args) - set(ARROW_ARGS))
        if unknown:
            raise TypeError(f"CSV reading takes the pyarrow.csv options {list(ARROW_ARGS)}, got {unknown}")
        self.paths = paths
        self.storage_options = storage_options or {}
        self.arrow_csv_args = arrow_csv_args
        self.fs, self.files = expand_paths(paths, suffixes=SUFFIXES, storage_options=self.storage_options)

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        return [ReadTask(name=f, payload=f) for f in self.files]

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        path = task.payload
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
        yield table

    def describe(self) -> str:
        return f"csv[{len(self.files)} files]"


@dataclass
class CSVSink(FileSink):
    """Writes one CSV file (with a header) per block under ``path`` (a folder, local or fsspec URL)."""

    name: str = "csv"
    suffix: ClassVar[str] = "csv"

    def write_file(self, fs: Any, target: str, block: pa.Table) -> None:
        with fs.open(target, "wb") as f:
            pacsv.write_csv(block, f)
