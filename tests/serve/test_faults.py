"""Replica death under load, autoscaling with real load, and a clean shutdown.

Load lasts until what a test waits for has happened (``http_load`` + ``eventually``),
never for a number of seconds. The test that kills a worker runs on a cluster of its
own (a program with its own embedded cluster), so the session's cluster loses none.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from airflowless import serve
from tests.support.eventually import eventually
from tests.support.load import http_load

from .deployments import Busy

KILL_A_REPLICAS_WORKER = '''
import json
import os
import signal

import httpx

import airflowless
from airflowless import serve
from tests.serve.deployments import Worky
from tests.support.eventually import eventually
from tests.support.load import http_load

if __name__ == "__main__":
    airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
    serve.start(http_options={"port": 0})
    serve.run(Worky.bind(), name="worky", route_prefix="/worky")
    url = f"{serve.http_address()}/worky"

    def running() -> int:
        return int(serve.status()["worky"]["deployments"]["Worky"]["running_replicas"])

    replica_of = {}
    for _ in range(20):
        reply = httpx.post(url, json={}).json()
        replica_of[reply["pid"]] = reply["replica"]
    victim = sorted(replica_of)[0]

    def replaced() -> bool:  # the replacement replica answers and two run again
        try:
            reply = httpx.post(url, json={}, timeout=30)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200 and reply.json()["replica"] not in replica_of.values() and running() == 2

    with http_load(url, concurrency=8) as stats:
        eventually(lambda: stats.get("200", 0) > 200, message=lambda: f"load before the kill: {stats}")
        os.kill(victim, signal.SIGKILL)
        killed_at = dict(stats)
        eventually(replaced, timeout=120, message=lambda: f"{serve.status()} {stats}")
    after = {httpx.post(url, json={}).json()["pid"] for _ in range(30)}
    serve.shutdown()
    airflowless.shutdown()
    print(json.dumps({"pids": sorted(replica_of), "victim": victim, "stats": stats, "killed_at": killed_at,
                      "after": sorted(after)}))
'''


def test_killing_a_replicas_worker_under_load(tmp_path: Path) -> None:
    script = tmp_path / "kill_a_replicas_worker.py"
    script.write_text(KILL_A_REPLICAS_WORKER)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOWLESS_", "DASK_"))}
    environ.update(AIRFLOWLESS_HOME=str(tmp_path / "home"), PYTHONPATH=str(Path(__file__).parents[2]))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    stats, victim = outcome["stats"], outcome["victim"]
    assert len(outcome["pids"]) == 2  # one replica on each worker
    total = sum(stats.values())
    errors = total - stats.get("200", 0)
    print(f"\nreplica death under load: {total} requests, {errors} errors ({errors / total:.2%}) {stats}, "
          f"{outcome['killed_at']} before the kill")
    assert stats.get("200", 0) > 100 and errors / total < 0.05
    assert victim not in outcome["after"]  # the replacement may share the surviving worker until the nanny restarts one


def test_autoscaling_up_under_load_and_back_down(serve_url: str) -> None:
    serve.run(Busy.bind(), name="busy", route_prefix="/busy")

    def replicas() -> int:
        return int(serve.status()["busy"]["deployments"]["Busy"]["running_replicas"])

    assert replicas() == 1
    with http_load(f"{serve_url}/busy", concurrency=12) as stats:  # the load lasts until it has scaled up
        eventually(lambda: replicas() == 2, message=lambda: f"{serve.status()} {stats}")
    eventually(lambda: replicas() == 1, message=lambda: str(serve.status()))
    assert stats.get("200", 0) > 0 and set(stats) == {"200"}
    serve.delete("busy")


def test_shutdown_leaves_no_threads_or_ports(cluster_client: object) -> None:
    before = {t.name for t in threading.enumerate()}
    serve.start(http_options={"port": 0})
    port = int(serve.http_address().rsplit(":", 1)[1])
    serve.run(Busy.bind(), name="tmp", route_prefix="/tmp")
    assert httpx.post(f"http://127.0.0.1:{port}/tmp", json={}).status_code == 200
    serve.shutdown()
    assert not any(t.name == "airflowless-serve" for t in threading.enumerate())
    # Dask's offload pool belongs to the scheduler in this process (it builds submitted graphs there)
    left = {t.name for t in threading.enumerate() if t.is_alive() and not t.name.startswith("Dask-Offload")}
    assert left - before <= {"asyncio_0"}
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    s2 = socket.socket()
    # and the port is free again for a server (which sets SO_REUSEADDR, as uvicorn does: a closed
    # connection's TIME_WAIT may outlive the proxy, a listener may not)
    s2.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s2.bind(("127.0.0.1", port))
    s2.listen()
    s2.close()
