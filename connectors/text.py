"""Files as rows: each line of text files, or each whole file as bytes (Ray's ``read_text``, ``read_binary_files``).

One read task, and one block, per file. Text is decoded with ``encoding``
(gzip, bz2, xz and zstd files by their suffix, through fsspec) and split at
``\\n``; a ``\\r`` before it goes with it, and a file's last newline ends its
last line without starting an empty one. Blank lines (nothing but white space)
are dropped unless ``drop_empty_lines=False``. Binary files are read as they
are, never decompressed. ``include_paths`` adds a ``path`` column.

>>> import pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "a.txt").write_bytes(b"first\\n \\nsecond\\r\\n")
>>> source = TextSource(str(folder))
>>> [t.to_pylist() for task in source.plan() for t in source.read(task)]
[[{'text': 'first'}, {'text': 'second'}]]
>>> source = BinarySource(str(folder), include_paths=True)
>>> [t.column("bytes").to_pylist() for task in source.plan() for t in source.read(task)]
[[b'first\\n \\nsecond\\r\\n']]
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from airflowless.errors import ConfigError

from .base import ReadTask
from .files import FileSource
from .parquet import ReadError

__all__ = ["TextSource", "BinarySource"]

_MOST_BYTES = (1 << 31) - 1  # Arrow's binary type holds at most this many bytes in one array


class _WholeFiles(FileSource):
    """A source whose rows come from each file whole: one column of the file's data, and its path if asked."""

    column: ClassVar[str] = ""
    kind: ClassVar[str] = ""

    def __init__(self, paths: str | Sequence[str], *, include_paths: bool = False,
                 file_extensions: Sequence[str] | None = None, storage_options: dict[str, Any] | None = None) -> None:
        self.include_paths = include_paths
        suffixes = None if file_extensions is None else tuple(f".{e.lstrip('.')}" for e in file_extensions)  # "txt"
        super().__init__(paths, storage_options=storage_options, suffixes=suffixes)

    def read_columns(self, path: str) -> list[str]:
        return [self.column, "path"] if self.include_paths else [self.column]

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        path = task.payload[0]
        values = self.values(path)
        table = pa.table({self.column: values})
        if self.include_paths:
            table = table.append_column("path", pa.array([path] * len(values), pa.string()))
        yield table

    def values(self, path: str) -> pa.Array:
        """The rows of one file, as the values of :attr:`column`."""
        raise NotImplementedError

    def _bytes(self, path: str, compression: str | None) -> bytes:
        try:
            with self.fs.open(path, "rb", compression=compression) as f:
                return bytes(f.read())
        except (OSError, EOFError) as exc:
            raise ReadError(f"cannot read {self.kind} file {path!r}: {exc}") from exc


class TextSource(_WholeFiles):
    """Each line of text files as a row of ``text``."""

    name = "text"
    column = "text"
    kind = "text"

    def __init__(self, paths: str | Sequence[str], *, encoding: str = "utf-8", drop_empty_lines: bool = True,
                 **options: Any) -> None:
        try:
            codecs.lookup(encoding)  # the caller's error, told here rather than by every read task
        except LookupError:
            raise ConfigError(f"read_text: no text encoding is named {encoding!r}; pass one Python knows, "
                              "e.g. 'utf-8' or 'latin-1'") from None
        self.encoding, self.drop_empty_lines = encoding, drop_empty_lines
        super().__init__(paths, **options)

    def values(self, path: str) -> pa.Array:
        raw = self._bytes(path, "infer")
        try:
            text = raw.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise ReadError(f"cannot decode text file {path!r} as {self.encoding} at byte {exc.start} "
                            f"({exc.reason}): pass read_text(..., encoding=...) with the file's encoding "
                            "(e.g. 'latin-1'), or read it with read_binary_files") from None
        if not text:
            return pa.array([], pa.string())
        lines = pc.list_flatten(pc.split_pattern(pa.array([text.removesuffix("\n")]), "\n"))
        lines = pc.replace_substring_regex(lines, r"\r$", "")
        if self.drop_empty_lines:
            lines = lines.filter(pc.not_equal(pc.utf8_trim_whitespace(lines), ""))
        return lines


class BinarySource(_WholeFiles):
    """Each file as one row of ``bytes``, as it is on disk."""

    name = "binary"
    column = "bytes"
    kind = "binary"

    def values(self, path: str) -> pa.Array:
        try:
            size = self.fs.size(path)
        except OSError as exc:
            raise ReadError(f"cannot read binary file {path!r}: {exc}") from exc
        if size is not None and size > _MOST_BYTES:
            raise ReadError(f"binary file {path!r} holds {size:,} bytes; a row holds at most {_MOST_BYTES:,} "
                            "(2 GiB): read a file that large in parts yourself")
        return pa.array([self._bytes(path, None)], pa.binary())
