"""The embedded cluster's worker processes: started again when they die, as a nanny would."""

from __future__ import annotations

import os

KILL_AND_WATCH = """
import os, sys
import airflowless
sys.path.insert(0, sys.argv[1])
from tests.support.workers import kill_worker

client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
names = lambda: sorted(w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values())
names_before = names()
victim = sorted(client.run(os.getpid).values())[0]
kill_worker(client, victim)
assert names() == names_before, (names(), names_before)
assert all(client.run(lambda dask_worker: "airflowless" in dask_worker.plugins).values())
assert client.submit(sum, [1, 2], pure=False).result() == 3
print("REPLACED", victim)
airflowless.shutdown()
"""


def test_a_killed_worker_process_is_started_again_under_its_name(tmp_path, home) -> None:  # noqa: ANN001
    """On a cluster of its own (a driver subprocess): the shared cluster loses no worker."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", KILL_AND_WATCH, root], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "AIRFLOWLESS_HOME": str(home)})
    assert done.returncode == 0 and "REPLACED" in done.stdout, done.stdout + done.stderr


def test_a_worker_that_cannot_start_is_one_cluster_error_and_leaves_nothing(tmp_path, home) -> None:  # noqa: ANN001
    import subprocess
    import sys

    code = ("import psutil, airflowless\n"
            "try:\n    airflowless.init(n_workers=1, memory_limit='lots', quiet=True)\n"
            "except airflowless.errors.ClusterError as e:\n    print('CLUSTER-ERROR', e)\n"
            "print('CHILDREN', len(psutil.Process().children(recursive=True)))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "AIRFLOWLESS_HOME": str(home)})
    assert "CLUSTER-ERROR expected worker 'cpu-0'" in done.stdout, done.stdout + done.stderr
    assert "but it exited with code 1" in done.stdout
    assert "CHILDREN 0" in done.stdout


HEARTBEAT_FILTER = """
import asyncio, logging
from distributed import Scheduler, Worker
from airflowless.runtime.worker_main import _closing_heartbeat_filter

def record(text):
    return logging.LogRecord("distributed.worker", logging.ERROR, "worker.py", 0, text, None, None)

heartbeat, other = record("Failed to communicate with scheduler during heartbeat."), record("other")

async def run():
    async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as scheduler:
        worker = await Worker(scheduler.address, host="127.0.0.1", nthreads=1)
        keep = _closing_heartbeat_filter(worker)
        running = keep(heartbeat), keep(other)
        await worker.close()
        return (*running, keep(heartbeat), keep(other))

print("KEPT", *asyncio.run(run()))
"""


def test_a_heartbeat_that_fails_while_the_worker_closes_is_not_logged(tmp_path, home) -> None:  # noqa: ANN001
    """The race CI met: a heartbeat in flight as the worker closes its comms printed a traceback.

    A scheduler and a worker of their own, in a subprocess: in the test's process they would leave
    distributed's state (its worker instances) to the tests after it.
    """
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HEARTBEAT_FILTER], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "AIRFLOWLESS_HOME": str(home)})
    assert "KEPT True True False True" in done.stdout, done.stdout + done.stderr  # dropped only once it closes
