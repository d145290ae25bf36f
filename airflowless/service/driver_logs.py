"""A service's driver logs: written on the service's machine, kept with the run's outputs for every other.

A driver's output goes to a private file on the service's machine
(:func:`log_path`), as it happens. The service copies it to
``<storage>/runs/<id>/logs/driver.log`` (:func:`storage_uri`, recorded as the
run's ``driver_log_uri``) every :data:`SYNC_S` seconds while it grows, and once
more when it has seen the driver end, adding :data:`END_MARK`; so
``airflowless runs logs ID`` on any machine that reads the record and the
storage shows it (a few seconds behind) and knows when it has all of it. The
copy only grows (readers follow it by byte offset); past
:data:`~airflowless.dag.logs.LIMIT_BYTES` it says where the rest is and stops.
Copies are written by one thread of the service's own (:class:`Copier`), so a
slow object store never holds up its schedule.

>>> storage_uri("s3://bucket/prefix", 41)
's3://bucket/prefix/runs/41/logs/driver.log'
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dag.logs import LIMIT_BYTES
from ..names import join_under
from ..settings import get_settings

__all__ = ["END_MARK", "SYNC_S", "Copier", "DriverLog", "whole", "log_dir", "log_path", "storage_uri"]

SYNC_S = 5.0
END_MARK = b"[the service saw this driver end: the log is whole]\n"

log = logging.getLogger(__name__)


def log_dir() -> Path:
    """The service's private folder of driver logs on this machine."""
    from ..private import private_folder

    return private_folder(get_settings().home / "service" / "logs")


def log_path(run_id: int) -> Path:
    """Where the service keeps the output of run ``run_id``'s driver, on its own machine."""
    return get_settings().home / "service" / "logs" / f"run-{run_id}.log"


def storage_uri(storage: str, run_id: int) -> str:
    """Where the copy of run ``run_id``'s driver log goes, beside its stages' logs."""
    return join_under(storage, "runs", str(run_id), "logs", "driver.log")


@dataclass
class DriverLog:
    """One driver's log file on this machine and its copy at ``uri`` (None: not copied)."""

    path: Path
    uri: str | None
    limit: int = LIMIT_BYTES
    copied: int = 0  # bytes of the file the copy holds
    cut: bool = False  # the file passed the limit: the copy says so and takes no more
    synced_at: float = field(default_factory=lambda: time.monotonic() - SYNC_S)
    pending: bool = False  # a copy is queued or being written
    lock: threading.Lock = field(default_factory=threading.Lock)

    def due(self) -> bool:
        return self.uri is not None and not self.pending and time.monotonic() - self.synced_at >= SYNC_S

    def copy(self, *, final: bool = False, tries: int = 1) -> None:
        """Bring the copy up to the file (closed with :data:`END_MARK` when ``final``). A storage that cannot
        be written is logged and tried again: at the next copy, or (a final one) up to ``tries`` times."""
        with self.lock:
            try:
                for attempt in range(1, tries + 1):
                    try:
                        self._copy(final)
                        return
                    except Exception as exc:
                        log.warning("could not copy the driver log %s to %s (try %d of %d): %s", self.path,
                                    self.uri, attempt, tries, exc)
                        if attempt < tries:
                            time.sleep(min(2.0**attempt, 10.0))
            finally:
                self.synced_at, self.pending = time.monotonic(), False

    def _cut_note(self) -> bytes:
        return (f"\n[the driver's output passed {self.limit} bytes; the rest is on the service's machine, "
                f"{self.path}]\n").encode()

    def _copy(self, final: bool) -> None:
        if self.uri is None:
            return
        local = "://" not in self.uri or self.uri.startswith("file://")
        target = Path(self.uri.removeprefix("file://"))
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0
        if local and not self.copied and not self.cut and target.exists():  # an earlier service began it
            begun = target.stat().st_size  # (an adopted driver's): what it holds is the file's start
            self.cut = begun >= self.limit
            self.copied = min(begun, size, self.limit)
        if self.cut and not final:
            return
        if not self.cut and size == self.copied and not final:
            return
        end = min(size, self.limit)
        grown, tail = b"", b""
        if not self.cut:
            with self.path.open("rb") as source:
                source.seek(self.copied)
                grown = source.read(max(0, end - self.copied))
            if size > self.limit:
                tail = self._cut_note()
        if final:
            tail += END_MARK
        if local:  # a local or shared folder: append what grew (the user's alone, as the file it copies)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "ab") as out:
                out.write(grown + tail)
        else:  # object storage has no append: the whole copy again (it is bounded)
            import fsspec

            with self.path.open("rb") as source:
                whole = source.read(end)
            note = self._cut_note() if size > self.limit else b""
            with fsspec.open(self.uri, "wb") as out:
                out.write(whole + note + (END_MARK if final else b""))
        self.copied = end
        self.cut = self.cut or size > self.limit


def whole(end: bytes, finished_at: Any, seconds: float = 60.0) -> bool:
    """Whether a copy of a run's driver log whose last bytes are ``end`` holds all it ever will: the service
    closed it (:data:`END_MARK`), or its run ended (at ``finished_at``, an aware time) more than ``seconds``
    ago (its service stopped before it copied the end)."""
    from datetime import datetime, timezone

    return end.endswith(END_MARK) or (finished_at is not None
                                      and (datetime.now(timezone.utc) - finished_at).total_seconds() > seconds)


class Copier:
    """The service's one thread that writes driver log copies, in the order they were asked for."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def sync(self, driver_log: DriverLog, *, final: bool = False) -> None:
        """Copy ``driver_log`` soon: if it is due (every :data:`SYNC_S` s at most), or ``final`` (tried a few
        times: nothing copies it later)."""
        if driver_log.uri is None or not (final or driver_log.due()):
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airflowless-log-copies")
        driver_log.pending = True
        self._pool.submit(driver_log.copy, final=final, tries=3 if final else 1)

    def close(self) -> None:
        """Write what was asked for, then stop (a later :meth:`sync` starts the thread again)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
