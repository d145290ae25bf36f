"""``airflowless serve run / status / shutdown`` as real subprocesses on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from airflowless.runtime.processes import ProcessCluster
from airflowless.serve.replica_table import ReplicaInfo
from tests.support.eventually import eventually
from tests.support.process_cluster import process_cluster_fixture

APP = '''\
from airflowless import serve


def offset():
    return 10


@serve.deployment(num_replicas=2)
class Adder:
    def __init__(self, n):
        self.n = n

    def __call__(self, body):
        return {"sum": body["x"] + self.n + offset()}

    @serve.route
    def twice(self, body):
        return {"twice": 2 * body["x"]}


app = Adder.bind(1)
'''


@pytest.fixture
def env(home: Path, tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return {**os.environ, "AIRFLOWLESS_HOME": str(home), "COLUMNS": "200", "TMPDIR": str(tmp)}


def cli(*args: str, env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflowless.cli", "serve", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _show(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def test_run_status_shutdown(env: dict[str, str], tmp_path: Path) -> None:
    module = tmp_path / "apps" / "adder.py"
    module.parent.mkdir()
    module.write_text(APP)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out, err = (tmp_path / "serve.out").open("w"), (tmp_path / "serve.err").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "airflowless.cli", "serve", "run", f"{module}:app",
                             "--name", "adder", "--route-prefix", "/add", "--port", str(port)],
                            env=env, stdout=out, stderr=err)
    logs = lambda: (tmp_path / "serve.out").read_text() + (tmp_path / "serve.err").read_text()  # noqa: E731
    try:
        def up() -> bool:
            assert proc.poll() is None, f"serve run exited {proc.returncode}:\n{logs()}"
            try:
                return httpx.get(f"{url}/-/healthz", timeout=1).status_code == 200 and "press Ctrl+C" in logs()
            except httpx.HTTPError:
                return False

        eventually(up, timeout=120, interval=0.3, message=lambda: f"no /-/healthz on {url}:\n{logs()}")
        assert httpx.post(f"{url}/add", json={"x": 5}, timeout=10).json() == {"sum": 16}
        assert httpx.post(f"{url}/add/twice", json={"x": 5}, timeout=10).json() == {"twice": 10}
        printed = logs()
        assert f"serving application 'adder' at {url}/add/" in printed and f"POST {url}/add/twice" in printed

        status = cli("status", env=env)
        assert status.returncode == 0, _show(status)
        line = next(x for x in status.stdout.splitlines() if "adder" in x)
        for word in ("Adder", "/add", url, "2", "running", "reachable", f"{proc.pid} alive"):
            assert word in line, status.stdout

        stop = cli("shutdown", env=env)
        assert stop.returncode == 0, _show(stop)
        assert f"sent SIGTERM to process {proc.pid} (serving adder)" in stop.stdout
        assert proc.wait(timeout=60) == 0, logs()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds (TIME_WAIT may linger)
        s.bind(("127.0.0.1", port))  # the port is free again
    after = cli("status", "--all", env=env)
    assert after.returncode == 0, _show(after)
    assert "stopped" in after.stdout and "reachable" not in after.stdout
    assert cli("status", env=env).stdout.strip() == "no deployments are running"
    assert cli("shutdown", env=env).stdout.strip() == "no running deployments are recorded on this machine"


def test_run_errors_name_what_to_fix_before_starting_anything(env: dict[str, str], tmp_path: Path) -> None:
    missing = cli("run", str(tmp_path / "nope.py") + ":app", env=env)
    assert missing.returncode == 2 and "nope.py" in missing.stderr, _show(missing)
    module = tmp_path / "unbound.py"
    module.write_text(APP.replace("app = Adder.bind(1)", ""))
    unbound = cli("run", f"{module}:Adder", env=env)
    assert unbound.returncode == 2 and "bind it first" in unbound.stderr, _show(unbound)
    none = cli("run", str(module), env=env)
    assert none.returncode == 2 and "no Application" in none.stderr, _show(none)
    wrong = cli("run", f"{module}:offset", env=env)
    assert wrong.returncode == 2 and "not an Application" in wrong.stderr, _show(wrong)


# -- a `serve run` that is killed, and pids in the store that are not ours ------------------------------------
serve_cluster = process_cluster_fixture(n_workers=1, threads_per_worker=2)


def _serve_run(module: Path, port: int, env: dict[str, str], log: Path, address: str) -> subprocess.Popen[bytes]:
    """``airflowless serve run`` of ``module`` on the cluster at ``address``, once it answers on ``port``."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "airflowless.cli", "serve", "run", f"{module}:app",
                                 "--name", "adder", "--route-prefix", "/add", "--port", str(port),
                                 "--address", address], env=env, stdout=out, stderr=subprocess.STDOUT)

    def up() -> bool:
        assert proc.poll() is None, f"serve run exited {proc.returncode}:\n{log.read_text()}"
        try:
            return "press Ctrl+C" in log.read_text() and \
                httpx.post(f"http://127.0.0.1:{port}/add", json={"x": 1}, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    eventually(up, timeout=180, message=log.read_text)
    return proc


def _replicas(address: str) -> list[ReplicaInfo]:
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        table = client.get_metadata(["airflowless-serve", "adder", "Adder"], default=None)
    return [ReplicaInfo(*row) for row in table["replicas"]] if table else []


def _listening(info: ReplicaInfo) -> bool:
    with socket.socket() as s:
        return s.connect_ex((info.host, info.port)) == 0


def test_replicas_of_a_killed_serve_run_stop_by_themselves(env: dict[str, str], tmp_path: Path,
                                                           serve_cluster: ProcessCluster) -> None:
    module = tmp_path / "adder.py"
    module.write_text(APP)
    env = {**env, "AIRFLOWLESS_SERVE_LEASE_S": "3"}
    proc = _serve_run(module, free_port(), env, tmp_path / "serve.log", serve_cluster.address)
    replicas = _replicas(serve_cluster.address)
    assert len(replicas) == 2 and all(_listening(r) for r in replicas)
    proc.kill()  # SIGKILL: no serve.shutdown() runs
    proc.wait()
    eventually(lambda: not any(_listening(r) for r in replicas), timeout=120)
    eventually(lambda: _replicas(serve_cluster.address) == [])  # no tokens left in the scheduler


def test_shutdown_stops_the_replicas_of_a_killed_serve_run(env: dict[str, str], tmp_path: Path,
                                                           serve_cluster: ProcessCluster) -> None:
    module = tmp_path / "adder.py"
    module.write_text(APP)
    env = {**env, "AIRFLOWLESS_SERVE_LEASE_S": "600"}  # so that only `serve shutdown` can stop them
    proc = _serve_run(module, free_port(), env, tmp_path / "serve.log", serve_cluster.address)
    replicas = _replicas(serve_cluster.address)
    assert len(replicas) == 2
    proc.kill()
    proc.wait()
    assert all(_listening(r) for r in replicas)
    stop = cli("shutdown", "--address", serve_cluster.address, env=env)
    assert stop.returncode == 0, _show(stop)
    assert f"process {proc.pid} (serving adder) is gone" in stop.stdout
    assert "stopped 2 replica(s)" in stop.stdout, _show(stop)
    assert not any(_listening(r) for r in replicas)
    assert _replicas(serve_cluster.address) == []
    assert "no deployments are running" in cli("status", env=env).stdout


def test_shutdown_signals_no_pid_it_cannot_prove_is_a_serve_run(env: dict[str, str], tmp_path: Path) -> None:
    from airflowless.store import open_store

    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        store = open_store(f"sqlite:///{Path(env['AIRFLOWLESS_HOME']) / 'airflowless.db'}")
        store.record_deployment("forged", "Adder", route_prefix="/", num_replicas=1, http_address=None,
                                config={}, pid=sleeper.pid, hostname=socket.gethostname())
        store.close()
        stop = cli("shutdown", env=env)
        assert stop.returncode == 1, _show(stop)
        assert f"process {sleeper.pid} (serving forged) was not signalled" in stop.stderr, _show(stop)
        assert "not `airflowless serve run`" in stop.stderr
        assert sleeper.poll() is None  # still running: never signalled
        assert "forged" in cli("status", env=env).stdout  # and its row was left as it was
    finally:
        sleeper.kill()
        sleeper.wait()
