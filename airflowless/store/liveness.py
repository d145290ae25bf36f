"""Is a run's driver still alive? The rule behind the ``abandoned`` state.

A driver records who it is when its run starts (host, pid, the process's start
time) and then touches a heartbeat every ``AIRFLOWLESS_HEARTBEAT_S`` seconds
(default 5, :mod:`airflowless.settings`). A reader
decides:

- same host: the driver is alive while a process with that pid exists and
  started at the recorded time (so a reused pid does not count);
- another host (or no pid recorded): alive while the heartbeat is younger than
  ``AIRFLOWLESS_HEARTBEAT_TIMEOUT_S`` (default 60).

>>> me = this_driver()
>>> driver_alive(me, heartbeat_at=None, now=0.0)
True
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime

from ..settings import get_settings

__all__ = ["Driver", "this_driver", "driver_alive", "alive_since"]

_START_TOLERANCE_S = 1.0  # process start times are derived from clock ticks since boot


@dataclass(frozen=True)
class Driver:
    """The process that drives a run."""

    host: str | None
    pid: int | None
    started: float | None  # the process's start time (seconds since the epoch)


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def this_driver() -> Driver:
    """The calling process, as a run records it."""
    pid = os.getpid()
    return Driver(socket.gethostname(), pid, _start_time(pid))


def _process_matches(pid: int, started: float | None) -> bool:
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(process.create_time() - started) <= _START_TOLERANCE_S
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # someone else's process with that pid: it exists
        return True


def alive_since(pid: int | None, since: datetime) -> bool:
    """Whether ``pid`` is a live process of this host that started before ``since`` (not a later
    process given the same pid): a serving process that wrote its rows at ``since``."""
    import psutil

    if not pid:
        return False
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= since.timestamp() + 1
    except psutil.Error:
        return False


def driver_alive(driver: Driver, *, heartbeat_at: datetime | float | None, now: float) -> bool:
    """Whether ``driver`` may still be running its run; ``now`` is :func:`time.time`."""
    if driver.pid is not None and driver.host == socket.gethostname():
        return _process_matches(driver.pid, driver.started)
    if heartbeat_at is None:
        return False
    beat = heartbeat_at.timestamp() if isinstance(heartbeat_at, datetime) else heartbeat_at
    return now - beat <= get_settings().heartbeat_timeout_s
