"""Run ``tests.serve.tls_app`` in a process of its own and knock on every port it reports.

>>> from tests.support.tls_driver import KNOCKS
>>> [kind for kind, _ in KNOCKS]
['plaintext', 'no-cert', 'wrong-cert', 'right-cert']
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.tls_probe import client_context, probe

__all__ = ["KNOCKS", "run_tls_app", "knock_everywhere", "knock_from", "dask_ports"]

KNOCKS = [("plaintext", "none"), ("no-cert", "none"), ("wrong-cert", "other"), ("right-cert", "ours")]
_ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def run_tls_app(args: list[str], env: dict[str, str], *, timeout: float = 150.0,
                prefix: tuple[str, ...] = (), clean_env: bool = False) -> Iterator[dict[str, Any]]:
    """Start the app, yield its report (a dict), then let it shut down (killed if it does not).

    ``prefix`` goes before the command (``ip netns exec NS`` runs it on a
    simulated host); ``clean_env`` starts from an environment without
    ``AIRFLOWLESS_*`` and ``DASK_*`` variables.
    """
    base = {k: v for k, v in os.environ.items()
            if not (clean_env and k.startswith(("AIRFLOWLESS_", "DASK_")))}
    proc = subprocess.Popen([*prefix, sys.executable, "-m", "tests.serve.tls_app", *args], cwd=_ROOT,
                            env={**base, "PYTHONPATH": str(_ROOT), **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        line = _read_line(proc, timeout)
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"tls_app exited with {proc.returncode} before reporting:\n{err[-4000:]}")
        yield json.loads(line)
        proc.stdin.write("done\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=1.0):
                line = proc.stdout.readline()
                if not line or line.startswith("{"):
                    return line
            elif proc.poll() is not None:
                return ""
    raise AssertionError(f"tls_app did not report within {timeout:g} s")


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    return host.strip("[]"), int(port)


def dask_ports(client: Any) -> list[dict[str, Any]]:
    """Every port of ``client``'s cluster as :func:`knock_everywhere` takes them: the scheduler, its dashboard,
    and per worker its comm, its nanny and its dashboard (``{"kind", "host", "port", "protocol"}``)."""
    info = client.scheduler_info(n_workers=-1)
    ports: list[dict[str, Any]] = []

    def add(kind: str, host: str, port: int, protocol: str) -> None:
        ports.append({"kind": kind, "host": host, "port": port, "protocol": protocol})

    scheduler_host, scheduler_port = _host_port(client.scheduler.address)
    add("scheduler", scheduler_host, scheduler_port, "dask")
    add("scheduler dashboard", scheduler_host, int(info["services"]["dashboard"]), "http")
    for address, worker in info["workers"].items():
        host, port = _host_port(address)
        add("worker", host, port, "dask")
        if worker.get("nanny"):
            add("nanny", *_host_port(worker["nanny"]), "dask")
        if "dashboard" in worker.get("services", {}):
            add("worker dashboard", host, int(worker["services"]["dashboard"]), "http")
    return ports


def knock_everywhere(ports: list[dict[str, Any]], ours: Path, other: Path) -> dict[str, dict[str, str]]:
    """``{"<kind> host:port": {knock: "refused" | "open" | "silent"}}`` for every port and every knock."""
    contexts = {"none": None, "ours": client_context(ours), "other": client_context(other)}
    found = {}
    for port in ports:
        label = f"{port['kind']} {port['host']}:{port['port']}"
        found[label] = {}
        for knock, which in KNOCKS:
            context = None if knock == "plaintext" else (client_context(None) if knock == "no-cert"
                                                          else contexts[which])
            found[label][knock] = probe(port["host"], port["port"], context, protocol=port["protocol"])
    return found


def knock_from(prefix: tuple[str, ...], ports: list[dict[str, Any]], ours: Path, other: Path) -> dict[str, Any]:
    """:func:`knock_everywhere` run by a process started with ``prefix`` (on a simulated host)."""
    code = ("import json, sys\nfrom pathlib import Path\nfrom tests.support.tls_driver import knock_everywhere\n"
            "print(json.dumps(knock_everywhere(json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))))")
    done = subprocess.run([*prefix, sys.executable, "-c", code, json.dumps(ports), str(ours), str(other)],
                          cwd=_ROOT, env={**os.environ, "PYTHONPATH": str(_ROOT)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
