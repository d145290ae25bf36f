"""moto's S3 as a real HTTP server on loopback, in its own process (a fixture module: import ``s3_endpoint``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require_module, require_service

__all__ = ["s3_endpoint", "s3_client"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """The URL of a moto S3 server started for this test module."""
    require_module("moto")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError as exc:
                if server.poll() is not None or time.monotonic() > deadline:
                    err = server.stderr.read().decode()[-500:] if server.stderr and server.poll() is not None else ""
                    require_service("moto S3 server", f"it did not answer at {url} ({exc}) {err}")
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client of the moto server at ``endpoint``."""
    boto3: Any = require_module("boto3")
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="x",
                        region_name="us-east-1")
