"""Stopping a process a test started: asked first, killed if it does not go."""

from __future__ import annotations

import subprocess
from typing import Any


def stop(process: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; returns once the process is gone."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
