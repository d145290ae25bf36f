"""Processes the tests start: the service as users run it, and stopping one (asked first, killed if it does not go)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def stop(process: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; returns once the process is gone."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def start_service(db: str, address: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``airflowless service start`` on record ``db`` and cluster ``address``, ticking every 0.1 s, its output
    appended to ``log``; ``env`` added to this process's environment."""
    return subprocess.Popen([sys.executable, "-m", "airflowless.cli", "service", "start", "--db", db,
                             "--address", address, "--tick", "0.1"],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
