"""Nothing of an embedded cluster outlives its driver: SIGTERM or SIGKILL, during start-up or a run.

The driver is a real subprocess; its descendants are recorded (psutil) right
before it is killed, and must all be gone within 5 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.eventually import eventually

DRIVER = """\
import time
import airflowless

client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
print("READY", flush=True)
running = client.submit(time.sleep, 600, pure=False)
while not any(client.processing().values()):
    time.sleep(0.05)
print("RUNNING", flush=True)
time.sleep(600)
"""


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _workers_started(pid: int) -> list[psutil.Process]:
    def started(p: psutil.Process) -> bool:
        try:
            return "airflowless.runtime.worker_main" in " ".join(p.cmdline())
        except psutil.Error:
            return False

    workers = [p for p in _descendants(pid) if started(p)]
    return workers if len(workers) == 2 else []


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    def alive(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [p for p in processes if alive(p)]


@pytest.mark.parametrize("when", ["start-up", "run"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killing_the_driver_leaves_no_process(when: str, sig: signal.Signals, tmp_path: Path,
                                              home: Path) -> None:
    script = tmp_path / "driver.py"  # no __main__ guard, as a first script would be
    script.write_text(DRIVER)
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    driver = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        if when == "start-up":  # both worker processes exist, none has registered yet
            eventually(lambda: _workers_started(driver.pid), message="worker processes started")
        else:
            assert driver.stdout is not None
            for wanted in ("READY", "RUNNING"):
                line = driver.stdout.readline().strip()
                assert line == wanted, f"expected {wanted!r} from the driver, got {line!r}"
        recorded = _descendants(driver.pid)
        assert len(recorded) >= 2
        driver.send_signal(sig)
        driver.wait(timeout=60)
        eventually(lambda: not _alive(recorded), timeout=5.0,
                   message=lambda: f"still alive: {[(p.pid, p.cmdline()) for p in _alive(recorded)]}")
    finally:
        for p in _alive(_descendants(driver.pid)):
            p.kill()
        driver.kill()
        driver.wait()
