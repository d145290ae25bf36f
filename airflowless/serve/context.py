"""Serve in this process: the driver's one :class:`~.driver.ServeRuntime`, and the worker hosting replicas here.

A leaf of ``serve/``: a :class:`~.handle.DeploymentHandle` asks it where to
route (the driver's runtime, or the worker of this process's replicas)
without importing the runtime's modules; :mod:`.api` starts and stops the
runtime through it, and a replica records its worker here when it starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .driver import ServeRuntime

__all__ = ["current_runtime", "host_worker", "set_host_worker", "start_runtime", "stop_runtime"]

_lock = threading.Lock()
_runtime: ServeRuntime | None = None
_host_worker: Any = None  # the worker of this process's replicas (their own threads have no Dask task context)


def current_runtime() -> ServeRuntime | None:
    """The serve runtime this process started, or None."""
    return _runtime


def start_runtime(make: Callable[[], ServeRuntime]) -> ServeRuntime:
    """The running serve runtime; made with ``make()`` and started if there is none yet."""
    global _runtime
    with _lock:
        if _runtime is None:
            runtime = make()
            runtime.start()
            _runtime = runtime
        return _runtime


def stop_runtime() -> None:
    """Stop this process's serve runtime, if one runs."""
    global _runtime
    with _lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.stop()


def host_worker() -> Any:
    """The Dask worker hosting replicas in this process, or None: where a replica's handles route."""
    return _host_worker


def set_host_worker(worker: Any) -> None:
    global _host_worker
    _host_worker = worker
