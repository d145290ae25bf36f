"""Files as rows: each line of text files, or each whole file as bytes (Ray's ``read_text``, ``read_binary_files``).

One read task, and one block, per file (under 2 GiB each). Text files ending
in ``.gz``, ``.bz2``, ``.xz`` or ``.zst`` (with the ``zstandard`` package) are
decompressed; the text is decoded with ``encoding`` and split at ``\\n``; a
``\\r`` before it goes with it, and a file's last newline ends its last line
without starting an empty one. Blank lines (nothing but white space) are
dropped unless ``drop_empty_lines=False``. Binary files are read as they are,
never decompressed (Ray decompresses them). ``include_paths`` adds a ``path``
column.

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

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from airflowless.errors import ConfigError

from .base import ReadTask
from .files import FileSource
from .parquet import ReadError

__all__ = ["TextSource", "BinarySource"]

_MOST_BYTES = (1 << 31) - 2  # Arrow's string and binary types hold at most this many bytes in one array
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}  # by suffix; a .zip is no text file


class _WholeFiles(FileSource):
    """A source whose rows come from each file whole: one column of the file's data, and its path if asked."""

    column: ClassVar[str] = ""
    value_type: ClassVar[pa.DataType] = pa.null()

    def __init__(self, paths: str | Sequence[str], *, include_paths: bool = False,
                 file_extensions: str | Sequence[str] | None = None,
                 storage_options: dict[str, Any] | None = None) -> None:
        self.include_paths = include_paths
        super().__init__(paths, storage_options=storage_options, suffixes=_suffixes(file_extensions))

    def read_columns(self, path: str) -> list[str]:
        return self.schema().names

    def schema(self) -> pa.Schema:
        return pa.schema([(self.column, self.value_type), ("path", pa.string())][:2 if self.include_paths else 1])

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
                data = bytes(f.read())
        except Exception as exc:  # a missing file, a corrupt archive (zlib.error, LZMAError, ...)
            raise ReadError(f"cannot read {self.name} file {path!r}: {type(exc).__name__}: {exc}") from exc
        if len(data) > _MOST_BYTES:
            raise ReadError(f"{self.name} file {path!r} holds {len(data):,} bytes; a block holds at most "
                            f"{_MOST_BYTES:,} (2 GiB): split the file")
        return data


class TextSource(_WholeFiles):
    """Each line of text files as a row of ``text``."""

    name = "text"
    column = "text"
    value_type = pa.string()

    def __init__(self, paths: str | Sequence[str], *, encoding: str = "utf-8", drop_empty_lines: bool = True,
                 **options: Any) -> None:
        try:
            b"x".decode(encoding, errors="ignore")  # the caller's error, told here rather than by every read task
        except LookupError:  # unknown, or no text encoding ("rot13", "base64")
            raise ConfigError(f"read_text: {encoding!r} is no text encoding Python knows; pass one such as "
                              "'utf-8' or 'latin-1'") from None
        self.encoding, self.drop_empty_lines = encoding, drop_empty_lines
        super().__init__(paths, **options)

    def values(self, path: str) -> pa.Array:
        raw = self._bytes(path, _compression(path))
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
    value_type = pa.binary()

    def values(self, path: str) -> pa.Array:
        return pa.array([self._bytes(path, None)], pa.binary())


def _suffixes(file_extensions: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """Ray's ``file_extensions`` (``"txt"``, ``[".csv", "tsv"]``) as the suffixes a folder's files are kept by."""
    if file_extensions is None:
        return None
    extensions = [file_extensions] if isinstance(file_extensions, str) else list(file_extensions)
    if not extensions:
        raise ConfigError("file_extensions=[] keeps no file; pass None to read every file")
    return tuple(f".{extension.lstrip('.')}".lower() for extension in extensions)


def _compression(path: str) -> str | None:
    """The compression a text file's suffix names, if this process can read it (a ``ReadError`` if not)."""
    from fsspec.compression import compr

    name = next((name for suffix, name in _COMPRESSION.items() if path.lower().endswith(suffix)), None)
    if name is not None and name not in compr:
        raise ReadError(f"text file {path!r} is {name}-compressed, which this process cannot read: "
                        "pip install zstandard where the workers run")
    return name
