"""Run a test's own driver script (a cluster of its own, workers it may restart) and read what it found.

The script prints one line ``RESULT <json>``; :func:`run_script` returns that JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_script(tmp_path: Path, name: str, source: str, *, timeout: float = 240) -> Any:
    """Write ``source`` as ``tmp_path/name``, run it with a private AIRFLOWLESS_HOME, return its RESULT."""
    script = tmp_path / name
    script.write_text(source)
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert found, done.stdout + done.stderr
    return json.loads(found[-1].removeprefix("RESULT "))
