"""Starting the HTTP proxy: a busy port is a clear error at once, and options cannot change under a running proxy."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from airflowless import serve
from airflowless.errors import ConfigError
from airflowless.serve.errors import ServeError
from tests.serve.test_http_surface import _read_until_closed


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


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_both_parsers_hold_a_client_to_the_same_header_limits(parser: str) -> None:
    """The limits are one mixin under both protocols: the fallback parser answers as the fast one does."""
    import asyncio
    import threading

    pytest.importorskip(parser)
    from airflowless._library_internals import uvicorn_bound_port as bound_port
    from airflowless.serve.http_options import HTTPOptions
    from airflowless.serve.http_server import make_server, run_server
    from airflowless.serve.proxy import build_app

    options = HTTPOptions(port=0, max_header_bytes=4096, header_timeout_s=0.5, keep_alive_timeout_s=0.5)
    server = make_server(build_app({}, options), options, parser=parser)
    assert parser in server.config.http.__mro__[1].__name__.lower()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    task = asyncio.run_coroutine_threadsafe(run_server(server), loop)

    def exchange(*pieces: bytes) -> bytes:
        """Send ``pieces`` (one send each) and read until the server closes (the socket's 30 s timeout fails)."""
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            try:
                for piece in pieces:
                    sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused while we were still sending
            return _read_until_closed(sock)

    try:
        for _ in range(1000):
            if server.started:
                break
            threading.Event().wait(0.01)
        port = bound_port(server)
        head = b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        # headers that never end, in pieces: refused at the bound with 431, not buffered and not timed out
        never = exchange(head, *(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(16)))
        assert never.startswith(b"HTTP/1.1 431 ") and b"at most 4096 bytes" in never, never[:200]
        # complete headers over the bound arriving at once: the app's 431
        whole = exchange(head + b"Content-Length: 1\r\nX-Big: " + b"a" * 6000 + b"\r\n\r\n1")
        assert whole.startswith(b"HTTP/1.1 431 ") and b"at most 4096 bytes" in whole, whole[:200]
        # headers that stop coming: closed without an answer after header_timeout_s
        assert exchange(head + b"X-Slow: ") == b""
        # a served request, then the idle keep-alive connection is closed
        served = exchange(b"GET /-/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert served.startswith(b"HTTP/1.1 200 ") and served.endswith(b"success")
    finally:
        server.should_exit = True
        task.result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@serve.deployment(max_ongoing_requests=64)
class _Sleepy:
    async def __call__(self, body: object) -> dict[str, str]:
        import asyncio

        await asyncio.sleep(1.0)
        return {"slept": "1 s"}


def test_slow_clients_take_no_place_of_working_requests_and_health_checks_are_never_refused(
        cluster_client: object) -> None:
    """200 connections that never finish their headers (the limit is 16): every real request and health check
    is answered; the limit holds on requests being worked on, and even then the health check answers."""
    import threading

    from tests.serve.deployments import Echo

    serve.start(http_options={"port": 0, "limit_concurrency": 16})
    slow: list[socket.socket] = []
    try:
        serve.run(Echo.bind("!"), name="echo", route_prefix="/echo")
        serve.run(_Sleepy.bind(), name="sleepy", route_prefix="/sleepy")
        url = serve.http_address()
        host, port = url.removeprefix("http://").split(":")
        for _ in range(200):
            connection = socket.create_connection((host, int(port)))
            connection.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            slow.append(connection)
        with httpx.Client(timeout=10) as client:
            answers = [client.post(f"{url}/echo", json={"n": n}).status_code for n in range(25)]
            answers.append(client.get(f"{url}/-/healthz").status_code)
        assert answers == [200] * 26  # uvicorn's limit counted the slow connections: 503 to all of these

        statuses: list[int] = []

        def call() -> None:
            statuses.append(httpx.post(f"{url}/sleepy", json={}, timeout=10).status_code)

        callers = [threading.Thread(target=call) for _ in range(32)]
        for caller in callers:
            caller.start()
        time.sleep(0.5)  # all 32 sent: 16 worked on, the rest refused
        health = httpx.get(f"{url}/-/healthz", timeout=5)
        for caller in callers:
            caller.join(15)
        assert health.status_code == 200
        assert sorted(statuses) == [200] * 16 + [503] * 16, statuses
    finally:
        for connection in slow:
            connection.close()
        serve.shutdown()
