"""``Client.restart()`` on the embedded cluster: new worker processes, tasks forgotten, work runs after.

The workers have no Dask nanny; each names, as its nanny, a small server in the
driver that answers the scheduler's ``kill`` (``WorkerProcess``). The driver is
a real subprocess with its own cluster of 2 worker processes; one of them is
busy in a task that never ends by itself when the restart comes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = """\
import json, os, sys, time
import airflowless

if __name__ == "__main__":
    client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True, security=sys.argv[1] == "tls")
    before = client.run(os.getpid)
    busy = client.submit(time.sleep, 600, pure=False)
    while not any(client.processing().values()):
        time.sleep(0.05)
    client.restart(timeout=60)
    after = client.run(os.getpid)
    from distributed.diagnostics.plugin import NannyPlugin
    try:
        client.register_plugin(NannyPlugin())
        refused = ""
    except Exception as exc:
        refused = str(exc)
    print(json.dumps({"before": sorted(before.values()), "after": sorted(after.values()), "refused": refused,
                      "busy": busy.status, "sum": client.submit(sum, [1, 2]).result()}))
    airflowless.shutdown()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["tcp", "tls"])
def test_restart_replaces_every_worker_process_and_the_cluster_runs_after(tmp_path: Path, transport: str) -> None:
    script = tmp_path / "restart.py"
    script.write_text(DRIVER)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOWLESS_", "DASK_"))}
    environ.update(AIRFLOWLESS_HOME=str(tmp_path / "home"), PYTHONPATH=str(Path(__file__).parents[2]))
    done = subprocess.run([sys.executable, str(script), transport], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen["before"]) == len(seen["after"]) == 2
    assert not set(seen["before"]) & set(seen["after"])  # every process is new
    assert seen["busy"] == "cancelled"  # the restart forgot the running task
    assert seen["sum"] == 3
    assert "no nanny process to run a NannyPlugin in" in seen["refused"]  # said, not silently ignored
    # the restart is quiet: no "do not use a nanny and will be terminated", no "exited ...; starting it again"
    assert "do not use a nanny" not in done.stderr and "starting it again" not in done.stderr, done.stderr
