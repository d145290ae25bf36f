"""Killing one of the embedded cluster's worker processes, and waiting for its replacement."""

from __future__ import annotations

import os
import signal
from typing import Any

from tests.support.eventually import eventually


def kill_worker(client: Any, pid: int, timeout: float = 120) -> dict[str, int]:
    """SIGKILL the worker process ``pid``; returns the workers' pids once a new process
    has taken its place (as many workers as before, none of them ``pid``)."""
    count = len(client.run(os.getpid))
    os.kill(pid, signal.SIGKILL)

    def replaced() -> dict[str, int] | None:
        try:
            now = client.run(os.getpid)
        except Exception:  # the dead worker is still listed for a moment
            return None
        return now if len(now) == count and pid not in now.values() else None

    return eventually(replaced, timeout=timeout, message="a new worker process in place of the killed one")
