"""What a stage prints and logs, one file per attempt, kept with the run's outputs.

While a stage's body runs in a worker thread, what that thread writes to
``sys.stdout`` or ``sys.stderr`` and every ``logging`` record it emits (INFO
and up) go to ``<storage>/runs/<run>/logs/<node>.attempt-<n>.log``. Other
threads of the worker (another stage, Dask itself) are not mixed in: the
streams and the handler route by thread (:func:`install`, once per process).
Threads a stage starts itself are not followed.

An attempt that prints and logs nothing leaves no file (its log reads empty).
A log is bounded (:data:`LIMIT_BYTES`): past it, the file keeps its tail and
says how much was cut. A local (or shared) storage folder is written as the
stage runs, so ``airflowless runs logs RUN --follow`` shows it live; on object
storage the file is uploaded when the attempt ends.

>>> log_name("score[3]", 2)
'score[3].attempt-2.log'
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO, Any, TextIO

__all__ = ["LIMIT_BYTES", "attempt_logs", "capture", "install", "log_name", "read_log"]

LIMIT_BYTES = 10 * 2**20

_captures: dict[int, _Capture] = {}  # thread id -> where that thread's output goes now
_lock = threading.Lock()
_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


def log_name(node: str, attempt: int) -> str:
    return f"{node}.attempt-{attempt}.log"


def attempt_logs(node: str, latest: str | None, attempts: int) -> list[tuple[int, str]]:
    """(attempt, log URI) of every attempt of ``node``, beside the latest attempt's log (``latest``, as the
    record keeps it; None: no log kept).

    >>> attempt_logs("score[3]", "/s/runs/4/logs/score[3].attempt-2.log", 2)
    [(1, '/s/runs/4/logs/score[3].attempt-1.log'), (2, '/s/runs/4/logs/score[3].attempt-2.log')]
    """
    if not latest:
        return []
    folder = latest.rpartition("/")[0]
    return [(n, f"{folder}/{log_name(node, n)}") for n in range(1, max(attempts, 1) + 1)]


class _Capture:
    """One attempt's log: the file (a local temporary one for object storage), its size, its tail past the limit.

    The file is made on the first write: an attempt that says nothing leaves none (readers find an empty log).
    """

    def __init__(self, uri: str, limit: int) -> None:
        self.uri, self.limit = uri, limit
        self.local = "://" not in uri or uri.startswith("file://")
        self.path = ""
        self.file: IO[bytes] | None = None
        self.written = 0
        self.tail: bytearray | None = None  # past the limit: the last `limit` bytes
        self.cut = 0

    def _open(self) -> IO[bytes]:
        if self.local:
            path = self.uri.removeprefix("file://")
        else:
            fd, path = tempfile.mkstemp(suffix=".log")
            os.close(fd)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self.file = open(path, "ab")  # noqa: SIM115 - closed by close()
        return self.file

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        file = self.file or self._open()
        if self.tail is None and self.written + len(data) <= self.limit:
            file.write(data)
            file.flush()  # readable while the stage runs
            self.written += len(data)
            return
        if self.tail is None:
            self.tail = bytearray()
        self.tail += data
        if len(self.tail) > self.limit:
            self.cut += len(self.tail) - self.limit
            del self.tail[:len(self.tail) - self.limit]

    def close(self) -> None:
        if self.file is None:
            return  # nothing was written
        self.file.close()
        if self.tail is not None:  # the head was kept while it ran; the tail is what matters at the end
            with open(self.path, "rb") as head:
                kept = head.read()
            over = len(kept) + len(self.tail) - self.limit
            if over > 0:
                kept = kept[over:]
            with open(self.path, "wb") as out:
                cut = self.cut + max(over, 0)
                out.write(f"[airflowless: the first {cut} bytes of this log were cut; "
                          f"a stage's log keeps its last {self.limit} bytes]\n".encode())
                out.write(kept + bytes(self.tail))
        if not self.local:
            import fsspec

            with open(self.path, "rb") as done, fsspec.open(self.uri, "wb") as remote:
                remote.write(done.read())
            os.unlink(self.path)


class _Router(io.TextIOBase):
    """A standard stream that sends what a capturing thread writes to its log, and the rest where it went."""

    def __init__(self, original: TextIO) -> None:
        self.original = original

    def write(self, text: str) -> int:
        capture = _captures.get(threading.get_ident())
        if capture is None:
            return self.original.write(text)
        capture.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(Exception):
            self.original.flush()

    def fileno(self) -> int:
        return self.original.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.original, "encoding", "utf-8")

    def isatty(self) -> bool:
        return False


class _Handler(logging.Handler):
    """Logging records of a capturing thread go to its log; others of WARNING and up to stderr (as before)."""

    def emit(self, record: logging.LogRecord) -> None:
        capture = _captures.get(threading.get_ident())
        if capture is not None:
            capture.write(_FORMAT.format(record) + "\n")
        elif record.levelno >= logging.WARNING and not _other_handlers(record.name):
            logging.lastResort.handle(record)  # type: ignore[union-attr]  # what Python did without our handler


def _other_handlers(name: str) -> bool:
    """Whether a record of logger ``name`` reaches a handler other than ours."""
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        if any(not isinstance(h, _Handler) for h in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


def install() -> None:
    """Route this process's standard streams and root logging by thread (idempotent)."""
    with _lock:
        if not isinstance(sys.stdout, _Router):
            sys.stdout = _Router(sys.stdout)
        if not isinstance(sys.stderr, _Router):
            sys.stderr = _Router(sys.stderr)
        root = logging.getLogger()
        if not any(isinstance(h, _Handler) for h in root.handlers):
            root.addHandler(_Handler(logging.INFO))
            if root.level == logging.WARNING:  # Python's default: a stage's logging.info would be dropped
                root.setLevel(logging.INFO)


@contextlib.contextmanager
def capture(uri: str | None, limit: int = LIMIT_BYTES) -> Iterator[Any]:
    """Send this thread's output to the log at ``uri`` while the block runs (nothing if ``uri`` is None)."""
    if uri is None:
        yield None
        return
    install()
    log = _Capture(uri, limit)
    thread = threading.get_ident()
    _captures[thread] = log
    try:
        yield log
    finally:
        _captures.pop(thread, None)
        log.close()


def read_log(uri: str, offset: int = 0) -> bytes:
    """The bytes of the log at ``uri`` from ``offset`` (empty if it is not there yet)."""
    import fsspec

    try:
        with fsspec.open(uri, "rb") as log:
            log.seek(offset)
            return bytes(log.read())
    except FileNotFoundError:
        return b""
