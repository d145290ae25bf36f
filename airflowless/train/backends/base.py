"""Backends: how a framework's ranks find each other, around the training loop.

Lifecycle, on every rank, in the rank's worker process::

    with backend.rank_context(spec, rendezvous) as info:   # connect the ranks
        loop(config)                                       # info: e.g. network params
    # leaving the block disconnects (process groups destroyed, sockets closed)

The default backend connects nothing (each rank trains alone, e.g. scikit-learn).
"""

from __future__ import annotations

import contextlib
import importlib
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Backend", "free_port", "interface_of", "listen_on", "preloads_done", "worker_host"]


class Backend:
    equal_shards: bool = False  # ranks need exactly equal rows (lock-step collectives)
    timeout_s: float = 60.0
    modules: tuple[str, ...] = ()  # what the ranks import (see preload)

    @contextlib.contextmanager
    def rank_context(self, spec: Any, rendezvous: Any) -> Iterator[dict[str, Any]]:
        yield {}

    def preload(self, client: Any) -> None:
        """Start importing ``modules`` on every worker, without waiting for it.

        A fresh worker takes a second or more to import a framework; begun when a
        fit begins, that overlaps the driver's data preparation instead of
        delaying the ranks' rendezvous. Asked once per client (a Tuner's trials
        share their trainer's backend): later fits find the framework loaded.
        """
        if self.modules and getattr(self, "_preloaded_by", None) != client.id:
            self._preloaded_by = client.id
            with contextlib.suppress(Exception):  # only a head start: the ranks import what they need
                client.run(_import_modules, list(self.modules), wait=False)


_preloads: dict[str, threading.Event] = {}  # module -> set once its preload on this worker ended
_preloads_lock = threading.Lock()


async def _import_modules(modules: list[str]) -> None:
    """Import ``modules`` in a thread (the worker's event loop goes on meanwhile).

    Two threads importing one package at once can break each other (one sees the
    other's partially initialized ``torch``), so a rank waits for these imports
    (:func:`preloads_done`) before it loads the user's code.
    """
    import asyncio

    with _preloads_lock:
        missing = [name for name in modules if name not in sys.modules and name not in _preloads]
        done = threading.Event()
        _preloads.update(dict.fromkeys(missing, done))
    if missing:
        await asyncio.get_running_loop().run_in_executor(None, _import_all, missing, done)


def _import_all(modules: list[str], done: threading.Event) -> None:
    try:
        for name in modules:
            with contextlib.suppress(Exception):  # the rank's own import reports the error
                importlib.import_module(name)
    finally:
        done.set()


def preloads_done(timeout: float = 300.0) -> None:
    """Wait until this worker's background imports (started by :meth:`Backend.preload`) ended."""
    with _preloads_lock:
        pending = set(_preloads.values())
    for done in pending:
        done.wait(timeout)


def worker_host() -> str:
    """The host this rank's worker listens on (reachable by the other ranks)."""
    try:
        from distributed import get_worker

        return str(get_worker().ip)
    except (ValueError, ImportError):
        return "127.0.0.1"


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def listen_on(host: str) -> socket.socket:
    """A TCP socket listening on ``host`` (only), on a port the system picks."""
    return socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)


def interface_of(host: str) -> str | None:
    """The name of this machine's network interface holding the address ``host``, or None."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == host for a in addresses):
            return name
    return None
