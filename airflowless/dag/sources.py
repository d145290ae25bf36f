"""The source of the user's stage code, carried to the workers for their tracebacks.

A stage defined in a pipeline module, a script or a notebook cell is pickled
by value: a worker runs its code but has no copy of its file when it runs on
another host (or the notebook cell's file lives only in the kernel), so a
traceback from it names the file and line but shows no source line. Before a
run, :func:`ship_sources` sends the driver's text of those files to every
worker (and every worker that joins later) as a :class:`SourcesPlugin`, which
puts it in the worker's ``linecache``, where ``traceback`` looks for it. The
text is the driver's as the run starts: edited files show the code that ran.
"""

from __future__ import annotations

import hashlib
import linecache
from collections.abc import Iterable
from typing import Any

from distributed import WorkerPlugin

__all__ = ["SourcesPlugin", "ship_sources", "sources_of"]

_MAX_BYTES = 4 << 20  # a generated module of many megabytes is not worth carrying for tracebacks


class SourcesPlugin(WorkerPlugin):
    """Puts ``files`` (path -> text) in the worker's ``linecache``; replaced by a later run's for the same files."""

    idempotent = False

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.name = "airflowless-sources-" + hashlib.sha256("\0".join(sorted(files)).encode()).hexdigest()[:16]

    def setup(self, worker: Any) -> None:
        for path, text in self.files.items():
            # no modification time: linecache.checkcache keeps the entry, as it does for other loaders' text
            linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)


def sources_of(functions: Iterable[Any]) -> dict[str, str]:
    """The driver's text of the files ``functions`` were defined in, leaving out installed packages."""
    files: dict[str, str] = {}
    for fn in functions:
        code = getattr(fn, "__code__", None)
        path = getattr(code, "co_filename", "")
        if not path or path in files or "site-packages" in path or path.startswith("<frozen"):
            continue
        text = "".join(linecache.getlines(path))
        if text and len(text) <= _MAX_BYTES:
            files[path] = text
    return files


def ship_sources(client: Any, functions: Iterable[Any]) -> None:
    """Register a :class:`SourcesPlugin` with the files of ``functions`` on ``client``'s cluster."""
    files = sources_of(functions)
    if files:
        client.register_plugin(SourcesPlugin(files))
