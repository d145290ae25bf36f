"""A real ``mlflow server`` on a free loopback port (SQLite backend, artifacts served over its HTTP API): the
``mlflow_server`` fixture, its URL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.eventually import eventually

__all__ = ["mlflow_server"]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on a free loopback port, SQLite backend, artifacts served over its HTTP API."""
    folder = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no background job consumers
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - closed at teardown
    server = subprocess.Popen(
        [str(mlflow_cli), "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "--serve-artifacts",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert server.poll() is None, (folder / "server.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        eventually(healthy, timeout=240, interval=0.5, message="mlflow server did not answer /health")
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the uvicorn worker it started
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
