"""Resolving paths, globs, folders and fsspec URLs to files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import fsspec

from airflowless.errors import AirflowlessError

__all__ = ["expand_paths", "SourceNotFoundError"]


class SourceNotFoundError(AirflowlessError, FileNotFoundError):
    """No file matched what a read_* call named."""


def expand_paths(paths: str | Sequence[str], *, suffixes: tuple[str, ...],
                 storage_options: dict[str, Any] | None = None) -> tuple[Any, list[str]]:
    """(filesystem, sorted files) for ``paths``: files, folders (searched recursively), globs, URLs."""
    items = [paths] if isinstance(paths, str) else list(paths)
    if not items:
        raise SourceNotFoundError("no path given: pass a file, a folder, a glob or a URL")
    fs, _ = fsspec.core.url_to_fs(str(items[0]), **(storage_options or {}))
    found: list[str] = []
    for item in items:
        _, path = fsspec.core.url_to_fs(str(item), **(storage_options or {}))
        if any(ch in path for ch in "*?["):
            candidates = [p for p in fs.glob(path) if not fs.isdir(p)]
            hidden = [p for p in candidates if _hidden(p.rsplit("/", 1)[-1])]
        elif fs.isdir(path):
            candidates = fs.find(path)
            hidden = [p for p in candidates if _hidden(p[len(path.rstrip("/")):])]  # below the folder read
        elif fs.exists(path):
            candidates, hidden = [path], []
        else:
            raise SourceNotFoundError(f"{item!r} does not exist: expected a file, a folder, a glob or a URL")
        matches = sorted(p for p in set(candidates) - set(hidden) if _ends_in(p, suffixes) or p == path)
        if not matches:
            raise SourceNotFoundError(
                f"{item!r} matched no file" + (f" ending in {', '.join(suffixes)}" if suffixes else "")
                + (f" ({len(hidden)} whose name, or a folder's, starts with '.' or '_' left out)" if hidden else ""))
        found.extend(matches)
    return fs, found


def _hidden(relative: str) -> bool:
    """Whether a file or a folder on ``relative``'s way starts with "." or "_" (``.git``, ``_SUCCESS``,
    ``_temporary``): markers and tools' files, never data (as Ray and Spark read folders)."""
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def _ends_in(path: str, suffixes: tuple[str, ...]) -> bool:
    return not suffixes or path.rsplit("/", 1)[-1].lower().endswith(tuple(s.lower() for s in suffixes))
