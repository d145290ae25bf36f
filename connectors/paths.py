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
            matches = sorted(p for p in fs.glob(path) if _keep(p, suffixes) and not fs.isdir(p))
        elif fs.isdir(path):
            matches = sorted(p for p in fs.find(path) if _keep(p, suffixes))
        elif fs.exists(path):
            matches = [path]
        else:
            raise SourceNotFoundError(f"{item!r} does not exist: expected a file, a folder, a glob or a URL")
        if not matches:
            raise SourceNotFoundError(f"{item!r} matched no file" + (f" ending in {', '.join(suffixes)}" if suffixes
                                                                       else ""))
        found.extend(matches)
    return fs, found


def _keep(path: str, suffixes: tuple[str, ...]) -> bool:
    name = path.rsplit("/", 1)[-1]
    if name.startswith((".", "_")):
        return False
    return not suffixes or name.endswith(suffixes)
