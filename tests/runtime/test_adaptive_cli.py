"""``airflowless cluster up --adapt MIN:MAX``: a background cluster that adds and retires its own workers."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.eventually import eventually


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def _double(x: int) -> int:
    return 2 * x


@pytest.mark.timeout(150)
def test_an_adaptive_background_cluster_grows_for_waiting_tasks_and_shrinks_when_idle(home: Path) -> None:
    from distributed import Client

    env = {**os.environ, "AIRFLOWLESS_HOME": str(home)}
    up = _cli("cluster", "up", "--adapt", "0:2", env=env)
    assert up.returncode == 0, up.stderr
    address = next(line.split()[1] for line in up.stdout.splitlines() if line.startswith("scheduler"))
    assert "adaptive, 0:2" in up.stdout
    try:
        with Client(address, timeout=30) as client:
            def workers() -> int:
                return len(client.scheduler_info(n_workers=-1)["workers"])

            assert workers() == 0
            status = _cli("cluster", "status", env=env)  # the scheduler's own count: no worker pids are kept
            assert status.returncode == 0 and f"up at {address}, 0 workers (adaptive 0:2), dashboard" in status.stdout
            started = time.monotonic()
            # two tasks that each hold the one CPU a worker declares: two workers are wanted
            futures = [client.submit(time.sleep, 3, resources={"CPU": 1}, pure=False) for _ in range(2)]
            counts = [(0.0, workers())]
            grown = ""
            while not all(f.done() for f in futures):
                counts.append((round(time.monotonic() - started, 1), workers()))
                if counts[-1][1] == 2 and not grown:  # busy for ~3 s more: not retired while status asks
                    grown = _cli("cluster", "status", env=env).stdout
                time.sleep(0.25)
            assert re.search(r"up at \S+, (1 worker|2 workers) \(adaptive 0:2\)", grown), grown
            assert client.submit(_double, 21, resources={"CPU": 1}).result(timeout=60) == 42
            del futures  # nothing held: Dask keeps the last worker while it holds results a client wants
            eventually(lambda: workers() == 0, timeout=60)  # idle: retired down to the minimum
            counts.append((round(time.monotonic() - started, 1), workers()))
            print(f"\nworkers over time: {counts[::4] + counts[-1:]}")
            assert max(count for _, count in counts) == 2
    finally:
        pid = json.loads((home / "cluster.json").read_text())["scheduler_pid"]
        down = _cli("cluster", "down", env=env)
    assert down.returncode == 0, down.stderr
    # the process holding the scheduler and its workers is gone (and its workers with it)
    eventually(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
               timeout=30)


def test_adapt_takes_min_colon_max(home: Path) -> None:
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home)}
    bad = _cli("cluster", "up", "--adapt", "4", env=env)
    assert bad.returncode == 2 and "--adapt takes MIN:MAX" in bad.stderr
    reversed_ = _cli("cluster", "up", "--adapt", "3:1", env=env)
    assert reversed_.returncode == 2 and "minimum <= maximum" in reversed_.stderr


def test_status_says_when_an_adaptive_scheduler_does_not_answer(home: Path) -> None:
    """A state file of an adaptive cluster whose process runs but whose address nothing answers on."""
    from airflowless.runtime.processes import ProcessCluster, save_state

    env = {**os.environ, "AIRFLOWLESS_HOME": str(home)}
    with socket.socket() as unused:  # a port nothing listens on once closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    standing_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        save_state(ProcessCluster(address=f"tcp://127.0.0.1:{port}", dashboard_link="http://127.0.0.1:1/status",
                                  scheduler_pid=standing_in.pid, worker_pids=(), log_dir=str(home / "logs"),
                                  adaptive=(1, 3)), home / "cluster.json")
        status = _cli("cluster", "status", env=env)
    finally:
        standing_in.kill()
        standing_in.wait()
    assert status.returncode == 0, status.stderr
    assert "workers unknown (adaptive 1:3): the scheduler's process is running but the scheduler did not answer" \
        in status.stdout and "0/0" not in status.stdout, status.stdout
