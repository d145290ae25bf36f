"""Starting the HTTP proxy: a busy port is a clear error at once, and options cannot change under a running proxy."""

from __future__ import annotations

import socket

import httpx
import pytest

from airflowless import serve
from airflowless.errors import ConfigError
from airflowless.serve.errors import ServeError


def test_a_busy_port_is_a_serve_error_and_serve_can_start_elsewhere(cluster_client: object) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # uvicorn's sys.exit used to end the serve thread's loop: a bare TimeoutError after 60 s
        with pytest.raises(ServeError, match=f"could not listen on 127.0.0.1:{port}.*address is in use"):
            serve.start(http_options={"port": port})
    serve.start(http_options={"port": 0})
    try:
        assert httpx.get(f"{serve.http_address()}/-/healthz").text == "success"
    finally:
        serve.shutdown()


def test_start_again_with_other_limits_is_refused(cluster_client: object) -> None:
    serve.start(http_options={"port": 0, "limit_concurrency": 32})
    try:
        serve.start(http_options={"port": 0, "limit_concurrency": 32})  # the same options: nothing to do
        serve.start()
        with pytest.raises(ConfigError, match="limit_concurrency=32"):  # refused, not ignored
            serve.start(http_options={"limit_concurrency": 64})
        with pytest.raises(ConfigError, match="unknown http_options"):
            serve.start(http_options={"limit": 64})
    finally:
        serve.shutdown()


def test_bound_port_is_the_port_a_port_0_server_listens_on() -> None:
    import asyncio

    from airflowless.serve.http_options import HTTPOptions
    from airflowless.serve.http_server import bound_port, make_server, run_server

    async def app(scope: dict, receive: object, send: object) -> None:  # never called
        raise AssertionError

    async def main() -> int:
        server = make_server(app, HTTPOptions(port=0))
        task = asyncio.ensure_future(run_server(server))
        while not server.started:
            await asyncio.sleep(0.01)
        port = bound_port(server)
        with socket.create_connection(("127.0.0.1", port), timeout=10):  # something listens there
            pass
        server.should_exit = True
        await task
        return port

    assert asyncio.run(main()) > 0
