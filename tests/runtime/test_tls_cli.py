"""`airflowless cluster up --tls` as a user runs it, a driver joining with AIRFLOWLESS_TLS_DIR, and strangers
refused at every port of the background cluster (serve's ports over TLS are knocked on in
tests/serve/test_tls_embedded.py and tests/runtime/test_tls_hosts.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflowless.runtime import tls
from tests.support.tls_driver import KNOCKS, dask_ports, knock_everywhere, run_tls_app


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


_CLIENTS = """
import json, sys
from distributed import Client
from distributed.security import Security
found = []
for address, options in json.loads(sys.argv[1]):
    try:
        Client(address, timeout=5, security=Security(**options) if options else None).close()
        found.append("connected")
    except Exception as exc:
        found.append(f"refused ({type(exc).__name__})")
print(json.dumps(found))
"""


def _dask_clients(attempts: list[tuple[str, dict[str, object] | None]]) -> list[str]:
    """How real Dask clients fare, one attempt each (in a fresh process, so no state is shared)."""
    out = subprocess.run([sys.executable, "-c", _CLIENTS, json.dumps(attempts)], capture_output=True, text=True,
                         timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _fresh_env(home: Path) -> dict[str, str]:
    """The CLI's environment: its own home, and none of the caller's cluster or TLS settings."""
    cleared = ("AIRFLOWLESS_ADDRESS", "AIRFLOWLESS_TLS_DIR", "AIRFLOWLESS_TLS_CA", "AIRFLOWLESS_TLS_CERT",
               "AIRFLOWLESS_TLS_KEY")
    return {"AIRFLOWLESS_HOME": str(home), **{name: "" for name in cleared}}


@pytest.mark.timeout(240)
def test_cluster_up_tls_and_a_driver_joining_with_the_settings(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _fresh_env(home)
    up = _cli("cluster", "up", "--tls", "--workers", "2", env=env)
    assert up.returncode == 0, up.stderr
    try:
        state = json.loads((home / "cluster.json").read_text())
        assert state["address"].startswith("tls://") and state["dashboard_link"].startswith("https://")
        assert f"AIRFLOWLESS_TLS_DIR={state['tls_dir']}" in up.stdout
        ours = Path(state["tls_dir"])
        other = tls.generate(tmp_path / "other").directory

        driver_env = {**env, "AIRFLOWLESS_ADDRESS": state["address"], "AIRFLOWLESS_TLS_DIR": str(ours)}
        with run_tls_app(["--no-fit", "--no-serve"], driver_env) as report:
            knocks = knock_everywhere(report["ports"], ours, other)

        assert report["address"] == state["address"]
        assert report["pipeline"] == {"total": 90}
        kinds = {port["kind"] for port in report["ports"]}
        assert kinds == {"scheduler", "scheduler dashboard", "worker", "nanny", "worker dashboard"}
        expected = {knock: "open" if knock == "right-cert" else "refused" for knock, _ in KNOCKS}
        wrong = {port: seen for port, seen in knocks.items() if seen != expected}
        assert not wrong, f"ports that did not refuse strangers (or refused us): {wrong}"

        stranger = {"tls_ca_file": str(other / "ca.pem"), "tls_client_cert": str(other / "client.pem"),
                    "tls_client_key": str(other / "client-key.pem"), "require_encryption": True}
        friend = {**stranger, "tls_ca_file": str(ours / "ca.pem"), "tls_client_cert": str(ours / "client.pem"),
                  "tls_client_key": str(ours / "client-key.pem")}
        plain, wrong_ca, ours_too = _dask_clients([(state["address"].replace("tls://", "tcp://"), None),
                                                   (state["address"], stranger), (state["address"], friend)])
        assert plain.startswith("refused") and wrong_ca.startswith("refused"), (plain, wrong_ca)
        assert ours_too == "connected"  # the control: the same client with our certificate gets in
    finally:
        down = _cli("cluster", "down", env=env)
        assert down.returncode == 0, down.stderr


def _double(x: int) -> int:
    return 2 * x


@pytest.mark.timeout(120)
def test_cluster_up_adapt_on_tls_adds_workers_that_speak_tls_only(tmp_path: Path) -> None:
    from distributed import Client

    home = tmp_path / "home"
    env = _fresh_env(home)
    up = _cli("cluster", "up", "--tls", "--adapt", "1:2", env=env)  # minimum 1: a worker the adaptive loop added
    assert up.returncode == 0, up.stderr
    try:
        state = json.loads((home / "cluster.json").read_text())
        assert "adaptive, 1:2" in up.stdout
        assert state["address"].startswith("tls://") and state["dashboard_link"].startswith("https://")
        ours = Path(state["tls_dir"])
        other = tls.generate(tmp_path / "other").directory

        with Client(state["address"], security=tls.load(ours).security(), timeout=30) as client:
            assert client.submit(_double, 21, resources={"CPU": 1}).result(timeout=60) == 42
            workers = client.scheduler_info(n_workers=-1)["workers"]
            assert len(workers) == 1 and all(address.startswith("tls://") for address in workers)
            ports = dask_ports(client)
            knocks = knock_everywhere(ports, ours, other)

        kinds = {port["kind"] for port in ports}
        assert kinds == {"scheduler", "scheduler dashboard", "worker", "nanny", "worker dashboard"}
        expected = {knock: "open" if knock == "right-cert" else "refused" for knock, _ in KNOCKS}
        wrong = {port: seen for port, seen in knocks.items() if seen != expected}
        assert not wrong, f"ports that did not refuse strangers (or refused us): {wrong}"
    finally:
        down = _cli("cluster", "down", env=env)
        assert down.returncode == 0, down.stderr
