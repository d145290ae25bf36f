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

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..dag.logs import LIMIT_BYTES
from ..names import join_under
from ..settings import get_settings

__all__ = ["END_MARK", "SYNC_S", "Copier", "DriverLog", "log_dir", "log_path", "storage_uri"]

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

    def copy(self, *, final: bool = False) -> None:
        """Bring the copy up to the file (with :data:`END_MARK` when ``final``); a storage that cannot be
        written is logged, and tried again at the next copy."""
        with self.lock:
            try:
                self._copy(final)
            except Exception as exc:
                log.warning("could not copy the driver log %s to %s: %s", self.path, self.uri, exc)
            finally:
                self.synced_at, self.pending = time.monotonic(), False

    def _copy(self, final: bool) -> None:
        import fsspec

        if self.uri is None or self.cut:
            return
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0
        local = "://" not in self.uri or self.uri.startswith("file://")
        target = Path(self.uri.removeprefix("file://"))
        if local and not self.copied and target.exists():  # a copy an earlier service began (an adopted driver)
            self.copied = min(target.stat().st_size, size)
        if size == self.copied and not final:
            return
        end = min(size, self.limit)
        with self.path.open("rb") as source:
            source.seek(self.copied)
            grown = source.read(end - self.copied)
        tail = b""
        if size > self.limit:
            self.cut = True
            tail = (f"\n[the driver's output passed {self.limit} bytes; the rest is on the service's machine, "
                    f"{self.path}]\n").encode()
        if final:
            tail += END_MARK
        if local:  # a local or shared folder: append what grew
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "ab") as out:
                with contextlib.suppress(OSError):
                    target.chmod(0o600)  # the user's alone, as the file it copies
                out.write(grown + tail)
        else:  # object storage has no append: the whole copy again (it is bounded)
            with self.path.open("rb") as source:
                whole = source.read(end)
            with fsspec.open(self.uri, "wb") as out:
                out.write(whole + tail)
        self.copied = end


class Copier:
    """The service's one thread that writes driver log copies, in the order they were asked for."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airflowless-log-copies")

    def sync(self, driver_log: DriverLog, *, final: bool = False) -> None:
        """Copy ``driver_log`` soon: if it is due (every :data:`SYNC_S` s at most), or ``final``."""
        if driver_log.uri is None or not (final or driver_log.due()):
            return
        driver_log.pending = True
        self._pool.submit(driver_log.copy, final=final)

    def close(self) -> None:
        """Write what was asked for, then stop."""
        self._pool.shutdown(wait=True)
