"""A service's driver logs: written on the service's machine, kept with the run's outputs for every other.

A driver's output goes to a private file on the service's machine
(:func:`log_path`), as it happens. The service copies it to
``<storage>/runs/<id>/logs/driver.log`` (:func:`storage_uri`, recorded as the
run's ``driver_log_uri``) every :data:`SYNC_S` seconds while it grows and once
when the driver ends, so ``airflowless runs logs ID`` on any machine that reads
the record and the storage shows it (a few seconds behind), as it does the
stages' logs. The copy keeps the last :data:`~airflowless.dag.logs.LIMIT_BYTES`,
saying how much was cut before them.

>>> storage_uri("s3://bucket/prefix", 41)
's3://bucket/prefix/runs/41/logs/driver.log'
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..dag.logs import LIMIT_BYTES
from ..names import join_under
from ..settings import get_settings

__all__ = ["SYNC_S", "DriverLog", "log_dir", "log_path", "storage_uri"]

SYNC_S = 5.0

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
    copied: int = -1  # the file's size at the last copy
    copied_at: float = field(default_factory=time.monotonic)

    def sync(self, *, final: bool = False) -> None:
        """Copy the file to ``uri`` if it grew (at most every :data:`SYNC_S` s unless ``final``); a storage that
        cannot be written is logged, and tried again at the next sync."""
        if self.uri is None or (not final and time.monotonic() - self.copied_at < SYNC_S):
            return
        self.copied_at = time.monotonic()
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if size == self.copied:
            return
        try:
            self._copy(size)
        except Exception as exc:
            log.warning("could not copy the driver log %s to %s: %s", self.path, self.uri, exc)
            return
        self.copied = size

    def _copy(self, size: int) -> None:
        import fsspec

        with self.path.open("rb") as source:
            cut = max(0, size - self.limit)
            source.seek(cut)
            data = source.read(size - cut)
        with fsspec.open(self.uri, "wb", auto_mkdir=True) as target:
            if cut:
                target.write(f"[the first {cut} bytes of this log were cut]\n".encode())
            target.write(data)
        with contextlib.suppress(Exception):  # a local copy is the user's alone, as the file it copies
            if "://" not in str(self.uri):
                Path(str(self.uri)).chmod(0o600)
