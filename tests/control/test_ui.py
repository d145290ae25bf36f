"""``airflowless ui``: a real server process reading a record (SQLite, PostgreSQL), no cluster."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from airflowless.cli.main import cli
from airflowless.store import open_store
from tests.control.conftest import call
from tests.support.eventually import eventually


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[Callable[..., tuple[str, subprocess.Popen[str]]]]:
    """Start ``python -m airflowless ui ARGS`` and return its link once it listens."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen[str]]:
        environ = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), **(env or {})}
        if env is None or "AIRFLOWLESS_TOKEN" not in env:
            environ.pop("AIRFLOWLESS_TOKEN", None)
        process = subprocess.Popen([sys.executable, "-m", "airflowless.cli", "ui", "--port", "0", *args], env=environ,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        started.append(process)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(process.stderr or []), daemon=True).start()

        def link() -> str | None:
            assert process.poll() is None, "".join(lines)
            match = next((m for line in list(lines) if (m := re.search(r" at (https?://\S+/airflowless/) ", line))),
                         None)
            return match.group(1) if match else None

        found = eventually(link, timeout=60, message=lambda: "".join(lines))
        assert found is not None
        return found, process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _fill(url: str) -> int:
    store = open_store(url)
    try:
        run_id = store.create_run("recorded", module="m", params={"n": 3})
        store.finish_run(run_id, "succeeded")
        return run_id
    finally:
        store.close()


def _stops_on_ctrl_c(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 0


@pytest.mark.timeout(90)
def test_ui_serves_a_sqlite_record_without_a_cluster(ui: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    run_id = _fill(url)
    link, process = ui("--db", url)
    assert link.startswith("http://127.0.0.1:")
    status, body = call(link + "api/v1/runs")
    assert status == 200 and [(r["id"], r["status"]) for r in body["runs"]] == [(run_id, "succeeded")]
    status, live = call(link + "api/v1/live/data")
    assert status == 200 and live["available"] is False and "no cluster" in live["reason"]
    assert call(link + f"api/v1/runs/{run_id}/cancel", method="POST")[0] == 401
    status, body = call(link + f"api/v1/runs/{run_id}/cancel", method="POST", token="any")
    assert status == 403 and "without a token" in body["error"]
    assert call(link.replace("/airflowless/", "/"))[0] == 200  # / leads to the pages (or the API's document)
    _stops_on_ctrl_c(process)


@pytest.mark.timeout(90)
def test_ui_serves_a_postgresql_record(ui: Any, postgres_url: str) -> None:
    run_id = _fill(postgres_url)
    link, process = ui("--db", postgres_url)
    status, body = call(link + f"api/v1/runs/{run_id}")
    assert status == 200 and body["pipeline"] == "recorded" and body["params"] == {"n": 3}
    _stops_on_ctrl_c(process)


@pytest.mark.timeout(90)
def test_ui_beyond_loopback_needs_the_token_for_everything(ui: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    _fill(url)
    refused = CliRunner().invoke(cli, ["ui", "--db", url, "--host", "0.0.0.0"], env={"AIRFLOWLESS_TOKEN": ""})
    assert refused.exit_code == 2 and "AIRFLOWLESS_TOKEN" in refused.stderr

    link, process = ui("--db", url, "--host", "0.0.0.0", env={"AIRFLOWLESS_TOKEN": "a-long-shared-secret"})
    reads = link.replace("0.0.0.0", "127.0.0.1") + "api/v1/runs"
    assert call(reads)[0] == 401
    assert call(reads, token="a-long-shared-secret-not")[0] == 403
    status, body = call(reads, token="a-long-shared-secret")
    assert status == 200 and len(body["runs"]) == 1
    _stops_on_ctrl_c(process)


def test_ui_with_a_bad_store_url_says_so() -> None:
    done = CliRunner().invoke(cli, ["ui", "--db", "nosuchdb://x/y"])
    assert done.exit_code == 2 and "error:" in done.stderr and "nosuchdb" in done.stderr


def _https_client(ca: Path, cert_dir: Path | None = None) -> Any:
    """An httpx client that checks the server against ``ca`` and shows ``cert_dir``'s client certificate."""
    import ssl

    import httpx

    context = ssl.create_default_context(cafile=str(ca))
    if cert_dir is not None:
        context.load_cert_chain(cert_dir / "client.pem", cert_dir / "client-key.pem")
    return httpx.Client(verify=context, timeout=30)


def _listening(pid: int) -> set[str]:
    import psutil

    return {conn.laddr.ip for conn in psutil.Process(pid).net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN}


@pytest.mark.timeout(90)
def test_ui_tls_serves_https_on_loopback_to_holders_of_the_clusters_certificates(ui: Any, tmp_path: Path) -> None:
    import httpx

    from airflowless.runtime import tls
    from tests.support.tls_driver import knock_everywhere

    url = f"sqlite:///{tmp_path / 'record.db'}"
    run_id = _fill(url)
    ours = tls.generate(tmp_path / "home" / "tls").directory  # where `airflowless cluster up --tls` makes them
    other = tls.generate(tmp_path / "other").directory
    link, process = ui("--db", url, "--tls", env={"AIRFLOWLESS_TLS_DIR": ""})
    assert re.fullmatch(r"https://127\.0\.0\.1:\d+/airflowless/", link), link
    assert _listening(process.pid) == {"127.0.0.1"}  # loopback only, unless --host says otherwise

    with _https_client(ours / "ca.pem", ours) as client:  # a real HTTPS request, the server checked against our CA
        response = client.get(link + "api/v1/runs")
    assert response.status_code == 200 and [r["id"] for r in response.json()["runs"]] == [run_id]
    with pytest.raises(httpx.TransportError):  # plain HTTP on the same port: no answer, the connection closed
        httpx.get(link.replace("https://", "http://") + "api/v1/runs", timeout=30)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"), _https_client(other / "ca.pem", other) \
            as stranger:  # the server's certificate is not another CA's
        stranger.get(link + "api/v1/runs")

    port = int(link.split(":")[2].split("/")[0])  # and as every port of a TLS cluster, it wants our CA's client
    (seen,) = knock_everywhere([{"kind": "ui", "host": "127.0.0.1", "port": port, "protocol": "http"}],
                               ours, other).values()
    assert seen == {"plaintext": "refused", "no-cert": "refused", "wrong-cert": "refused", "right-cert": "open"}
    _stops_on_ctrl_c(process)


@pytest.mark.timeout(90)
def test_ui_serves_https_with_a_certificate_of_your_own(ui: Any, tmp_path: Path) -> None:
    import httpx

    from airflowless.runtime import tls

    url = f"sqlite:///{tmp_path / 'record.db'}"
    _fill(url)
    own = tls.generate(tmp_path / "own").directory
    link, process = ui("--db", url, "--tls-cert", str(own / "scheduler.pem"), "--tls-key", str(own / "scheduler-key.pem"))
    assert link.startswith("https://127.0.0.1:")
    with _https_client(own / "ca.pem") as client:  # no client certificate asked for without --tls-ca
        assert client.get(link + "api/v1/runs").status_code == 200
    with pytest.raises(httpx.TransportError):
        httpx.get(link.replace("https://", "http://") + "api/v1/runs", timeout=30)
    _stops_on_ctrl_c(process)


def test_ui_tls_says_what_is_missing(tmp_path: Path) -> None:
    from airflowless.runtime import tls

    env = {"AIRFLOWLESS_HOME": str(tmp_path / "home"), "AIRFLOWLESS_TLS_DIR": "", "AIRFLOWLESS_TLS_CA": "",
           "AIRFLOWLESS_TLS_CERT": "", "AIRFLOWLESS_TLS_KEY": ""}
    nothing = CliRunner().invoke(cli, ["ui", "--tls"], env=env)
    assert nothing.exit_code == 2 and "--tls found no certificates" in nothing.stderr
    assert "ca.pem" in nothing.stderr and "cluster up --tls" in nothing.stderr
    no_key = CliRunner().invoke(cli, ["ui", "--tls-cert", str(tmp_path / "x.pem")], env=env)
    assert no_key.exit_code == 2 and "got no key" in no_key.stderr
    own = tls.generate(tmp_path / "own").directory
    mismatched = CliRunner().invoke(cli, ["ui", "--tls-cert", str(own / "client.pem"),
                                          "--tls-key", str(own / "worker-key.pem")], env=env)
    assert mismatched.exit_code == 2 and "that belong together" in mismatched.stderr
    both = CliRunner().invoke(cli, ["ui", "--tls", "--tls-cert", str(own / "client.pem"),
                                    "--tls-key", str(own / "client-key.pem")], env=env)
    assert both.exit_code == 2 and "got both" in both.stderr
