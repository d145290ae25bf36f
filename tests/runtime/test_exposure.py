"""What the embedded cluster exposes and prints: loopback only, one dashboard line, a quiet exit.

Also how connecting fails: a ``tls://`` address without TLS settings, and a
port that refuses, each fail at once with one ClusterError.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import psutil
import pytest

LISTENER = """\
import sys, json, psutil
import airflowless

client = airflowless.init(n_workers=2)  # the defaults a user gets, dashboard ":8787" included
me = psutil.Process()
listening = [(p.pid, c.laddr.ip, c.laddr.port)
             for p in [me, *me.children(recursive=True)]
             for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
print("LISTENING", json.dumps(listening), flush=True)
print("DASHBOARD", client.scheduler_info()["services"]["dashboard"], flush=True)
sys.stdin.readline()  # until the test has tried the dashboard from outside
"""

HOLDS_RESULTS = """\
import airflowless

client = airflowless.init(n_workers=2)
kept = client.map(lambda i: i * 2, range(20), pure=False)
print("SUM", sum(client.gather(kept)), flush=True)
# exits holding results and without calling airflowless.shutdown()
"""


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("AIRFLOWLESS_ADDRESS", None)
    return env


def _own_addresses() -> list[str]:
    """This host's addresses other than loopback (where a neighbour on the network would connect)."""
    return [a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
            and not a.address.startswith(("127.", "::1", "fe80"))]


def _refused(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_every_port_binds_loopback_and_the_dashboard_refuses_other_addresses(tmp_path: Path,
                                                                               home: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", LISTENER], cwd=tmp_path, env=_env(home), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        lines = {}
        for _ in range(2):
            key, _, value = proc.stdout.readline().partition(" ")
            lines[key] = value
        import json

        listening = json.loads(lines["LISTENING"])
        dashboard = int(lines["DASHBOARD"])
        pids = {pid for pid, _, _ in listening}
        assert len(pids) == 3, listening  # the driver (scheduler, dashboard) and two workers
        assert {ip for _, ip, _ in listening} == {"127.0.0.1"}, listening
        assert dashboard in {port for _, _, port in listening}
        assert all(_refused(address, dashboard) for address in _own_addresses())
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()


def test_console_shows_the_dashboard_and_control_plane_lines_and_a_quiet_exit(tmp_path: Path, home: Path) -> None:
    with ExitStack() as stack:  # port 8787 taken (by this test, or already by someone else)
        taken = stack.enter_context(socket.socket())
        try:
            taken.bind(("127.0.0.1", 8787))
            taken.listen()
        except OSError:
            pass
        done = subprocess.run([sys.executable, "-c", HOLDS_RESULTS], cwd=tmp_path, env=_env(home),
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SUM 380" in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith("airflowless: embedded cluster, 2 workers, dashboard http://127.0.0.1:")
    assert lines[1].startswith("airflowless: control plane http://127.0.0.1:")
    assert ":8787/" not in lines[0] + lines[1]


CONNECT = """\
import sys, time
import airflowless
started = time.monotonic()
try:
    airflowless.init(sys.argv[1], quiet=True)
except airflowless.errors.ClusterError as exc:
    print(f"CLUSTER-ERROR after {time.monotonic() - started:.2f} s: {exc}")
"""


@pytest.mark.parametrize(("scheme", "says"), [
    ("tls", "expected TLS settings to connect to 'tls://127.0.0.1:"),
    ("tcp", "cannot reach a Dask scheduler at 'tcp://127.0.0.1:"),
])
def test_connecting_fails_at_once_with_one_clear_error(scheme: str, says: str, tmp_path: Path,
                                                      home: Path) -> None:
    with socket.socket() as sock:  # a port that was free: nobody listens, it refuses at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = subprocess.run([sys.executable, "-c", CONNECT, f"{scheme}://127.0.0.1:{port}"],
                          cwd=tmp_path, env=_env(home), capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stdout.strip()
    assert says in line, line + done.stderr
    seconds = float(line.split("after ")[1].split(" s")[0])
    assert seconds < 5.0, line  # Client's own retries took its full 10 s timeout
