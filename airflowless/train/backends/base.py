"""Backends: how a framework's ranks find each other, around the training loop.

Lifecycle, on every rank, in the rank's worker process::

    with backend.rank_context(spec, rendezvous) as info:   # connect the ranks
        loop(config)                                       # info: e.g. network params
    # leaving the block disconnects (process groups destroyed, sockets closed)

The default backend connects nothing (each rank trains alone, e.g. scikit-learn).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

__all__ = ["Backend", "free_port", "interface_of", "listen_on", "worker_host"]


class Backend:
    equal_shards: bool = False  # ranks need exactly equal rows (lock-step collectives)
    timeout_s: float = 60.0

    @contextlib.contextmanager
    def rank_context(self, spec: Any, rendezvous: Any) -> Iterator[dict[str, Any]]:
        yield {}


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
