"""Shared by the control-plane tests: a real standalone control server, and plain HTTP calls.

>>> # in a test: base = control_server(ControlContext(url, token="t")); call(base + "airflowless/api/v1/runs")
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflowless.control.context import ControlContext


def call(url: str, *, method: str = "GET", token: str | None = None, body: Any = None,
         timeout: float = 30) -> tuple[int, Any]:
    """``(status, parsed JSON or text)`` of one real HTTP request."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    if data is None and method == "POST":
        data = b""
    request = urllib.request.Request(url, method=method, data=data)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@pytest.fixture
def control_server() -> Iterator[Callable[..., str]]:
    """Start ``mount.start_server(ctx, host, 0)`` in a thread of its own; returns ``http://host:port/``."""
    from airflowless.control import mount

    stops: list[Callable[[], None]] = []

    def start(ctx: ControlContext, host: str = "127.0.0.1") -> str:
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        bound: dict[str, Any] = {}

        def run() -> None:
            asyncio.set_event_loop(loop)

            async def listen() -> None:
                bound["server"], bound["port"] = mount.start_server(ctx, host, 0)

            loop.run_until_complete(listen())
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=run, name="control-server", daemon=True)
        thread.start()
        assert ready.wait(30), "the control server did not start"

        def stop() -> None:
            loop.call_soon_threadsafe(bound["server"].stop)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            ctx.close()

        stops.append(stop)
        return f"http://{host}:{bound['port']}/"

    yield start
    for stop in stops:
        stop()
