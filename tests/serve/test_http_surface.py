"""The HTTP surface under hostile clients: real cluster, real uvicorn on 127.0.0.1, raw sockets.

The proxy of this module runs with short limits (1-2 s timeouts, 8
concurrent connections) so that slow clients are cut off quickly; each test
waits for the outcome (a status line, a closed socket), not for a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import select
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
import torch

from airflowless import serve
from airflowless.errors import ConfigError
from airflowless.serve.routing import http_routes
from tests.support.eventually import eventually

from .deployments import double
from .http_deployments import Answers, Chain, Gate, Plain, Post, Pre, TorchModel, WithRequest

LIMITS = {"header_timeout_s": 1.0, "body_timeout_s": 2.0, "keep_alive_timeout_s": 1.0, "limit_concurrency": 8}


@pytest.fixture(scope="module")
def serve_url(cluster_client: object) -> Iterator[str]:
    serve.start(http_options={"port": 0, **LIMITS})
    yield serve.http_address()
    serve.shutdown()


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=60)


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a 60 s socket timeout fails the test)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


# -- item 3: only declared routes ------------------------------------------------------------

def test_a_torch_module_deployment_routes_only_call_and_marked_methods(serve_url: str) -> None:
    assert set(http_routes(TorchModel.target)) == {"", "predict"}  # nn.Module's ~50 public methods are not
    handle = serve.run(TorchModel.bind(), name="torch", route_prefix="/m")
    url = f"{serve_url}/m"
    assert httpx.post(f"{url}/predict", json={"x": [1.0, 1.0]}).json() == {"y": [6.0]}
    assert httpx.post(url, json={"x": [1.0, 0.0]}).json() == {"y": [3.0]}  # __call__ (nn.Module's) -> forward
    inherited = sorted(n for n in dir(torch.nn.Module) if not n.startswith("_") and callable(getattr(torch.nn.Module, n)))
    assert len(inherited) > 40
    for name in [*inherited, "weight_device"]:
        reply = httpx.post(f"{url}/{name}", json="meta")
        assert reply.status_code == 404, (name, reply.status_code, reply.text)
        assert "@serve.route" in reply.json()["error"] and "/predict" in reply.json()["error"]
    # the probe's attack: POST /m/to "meta" used to move the weights to the meta device for every later request
    assert httpx.post(f"{url}/predict", json={"x": [1.0, 1.0]}).json() == {"y": [6.0]}
    assert handle.weight_device.remote().result(timeout=30) == "cpu"  # handles still call any method by name
    serve.delete("torch")


def test_marked_paths_and_bad_route_declarations(serve_url: str) -> None:
    serve.run(Plain.bind(), name="plain", route_prefix="/p")
    assert httpx.post(f"{serve_url}/p/v1/double", json={"x": 2}).json() == {"y": 4}
    assert httpx.post(f"{serve_url}/p/double", json={"x": 2}).status_code == 404
    serve.delete("plain")
    def _private(self: object, body: object) -> object:
        return body

    with pytest.raises(ConfigError, match="public method"):
        serve.route("/x")(_private)
    with pytest.raises(ConfigError, match="path such as"):
        serve.route("predict/")

    class Twice:
        @serve.route("/a")
        def one(self, body: object) -> object:
            return body

        @serve.route("/a")
        def two(self, body: object) -> object:
            return body

    with pytest.raises(ConfigError, match="both routed at '/a'"):
        serve.deployment(Twice)


# -- item 8: strict JSON ---------------------------------------------------------------------------

def test_json_in_and_out_is_strict(serve_url: str) -> None:
    serve.run(double.bind(), name="double", route_prefix="/d")
    serve.run(Plain.bind(), name="plain", route_prefix="/p")
    overflow = httpx.post(f"{serve_url}/d", json={"x": 1e308})  # 2e308 is inf: not JSON
    assert overflow.status_code == 500 and "not JSON" in overflow.json()["error"], overflow.text
    for body in (b"1e999", b'{"x": 1e999}', b"[-1e400]", b'{"x": NaN}', b"Infinity"):
        reply = httpx.post(f"{serve_url}/p", content=body)
        assert reply.status_code == 400, (body, reply.status_code, reply.text)
    deep_ok = json.loads("[" * 64 + "]" * 64)
    assert httpx.post(f"{serve_url}/p", json=deep_ok).json() == deep_ok
    for depth in (65, 500, 100_000):
        reply = httpx.post(f"{serve_url}/p", content=b"[" * depth + b"]" * depth)
        assert reply.status_code == 400 and "64" in reply.json()["error"], (depth, reply.text)
    nested = {"a": [{"b": {"c": [[[[1]]]]}}]}
    assert httpx.post(f"{serve_url}/p", json=nested).json() == nested
    serve.delete("double")
    serve.delete("plain")


# -- item 5: bodies bounded while they stream --------------------------------------------------------

def _chunked_headers(path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()


def test_a_chunked_body_over_the_limit_is_413_before_it_ends(serve_url: str) -> None:
    serve.run(Plain.bind(), name="plain", route_prefix="/p")
    with _connect(serve_url) as sock:
        sock.sendall(_chunked_headers("/p"))
        chunk = b"x" * 65536
        try:
            for _ in range(2 * 16 + 1):  # a bit over 2 MiB, and no terminating chunk: the body never ends
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy answered and closed while the body was still coming
        reply = _read_until_closed(sock)  # the old proxy waited for the end of the body: no reply, ever
    # The 413 is sent before the close; a close with unread bytes resets the connection, and
    # a reset may discard the reply before it is read: then the reply is empty, but it came.
    assert reply == b"" or (_status(reply) == 413 and b"at most 1048576 bytes" in reply), reply[:200]
    serve.delete("plain")


def test_a_200_mb_chunked_body_does_not_grow_the_proxy(serve_url: str) -> None:
    serve.run(Plain.bind(), name="plain", route_prefix="/p")
    proxy = psutil.Process()  # the proxy is this process's serve thread
    before = proxy.memory_info().rss
    sent = 0
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b"7" * (1 << 20))
    with _connect(serve_url) as sock:
        sock.sendall(_chunked_headers("/p"))
        try:
            while sent < 200 << 20:
                sock.sendall(chunk)
                sent += 1 << 20
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy answered 413 and closed the connection: the rest is never read
        reply = _read_until_closed(sock)
    grown = proxy.memory_info().rss - before
    assert _status(reply) in (413, 0) and sent < 200 << 20, (sent, reply[:100])
    assert grown < 64 << 20, f"the proxy's RSS grew by {grown >> 20} MiB"
    assert httpx.post(f"{serve_url}/p", json={"still": "up"}).json() == {"still": "up"}
    serve.delete("plain")


# -- item 7: slow clients are cut off ---------------------------------------------------------------------

def test_slow_headers_are_cut_off(serve_url: str) -> None:
    with _connect(serve_url) as sock:
        sock.sendall(b"POST /p HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # ...and the rest never comes
        assert _read_until_closed(sock) == b""


def test_headers_over_the_limit_are_431_also_when_they_arrive_at_once(serve_url: str) -> None:
    serve.run(Plain.bind(), name="plain", route_prefix="/p")
    assert httpx.post(f"{serve_url}/p", json=1, headers={"x-big": "a" * (15 << 10)}).json() == 1
    with _connect(serve_url) as sock:  # uvicorn's own bound (400) holds only for headers still incomplete at 16 KiB:
        sock.sendall(b"POST /p HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nX-Big: "  # one loopback
                     + b"a" * (20 << 10) + b"\r\n\r\n1")  # segment (64 KiB) arrives whole, and passed it
        reply = _read_until_closed(sock)
    assert _status(reply) == 431 and b"at most 16384 bytes" in reply, reply[:200]
    serve.delete("plain")


def test_headers_that_never_end_are_refused_at_the_limit_not_buffered(serve_url: str) -> None:
    with _connect(serve_url) as sock:
        sock.sendall(b"POST /p HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for i in range(64):  # 64 KiB of headers in 1 KiB pieces, and never the blank line that ends them
                sock.sendall(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed while the headers were still coming
        reply = _read_until_closed(sock)
    # a status line, so the size bound answered, not the 1 s header timeout (which closes silently);
    # the same with either parser (test_http_server runs both)
    assert _status(reply) == 431 and b"at most 16384 bytes" in reply, reply[:200]


def test_a_trickled_body_gets_408_and_the_connection_closes(serve_url: str) -> None:
    serve.run(Plain.bind(), name="plain", route_prefix="/p")
    with _connect(serve_url) as sock:
        sock.sendall(b"POST /p HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(100_000):  # a byte every 0.2 s would take 5 hours; the body timeout is 2 s
            sock.sendall(b" ")
            if select.select([sock], [], [], 0.2)[0]:
                break
        reply = _read_until_closed(sock)
    assert _status(reply) == 408 and b"did not arrive within 2 s" in reply
    serve.delete("plain")


def test_an_idle_keep_alive_connection_is_closed(serve_url: str) -> None:
    with _connect(serve_url) as sock:
        sock.settimeout(20)  # 20 times the keep-alive timeout of this proxy (the old proxy kept 30 s)
        sock.sendall(b"GET /-/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        reply = _read_until_closed(sock)
    assert _status(reply) == 200 and reply.endswith(b"success")


def test_over_the_concurrency_limit_is_503(serve_url: str) -> None:
    handle = serve.run(Gate.bind(), name="gate", route_prefix="/g")
    limit = LIMITS["limit_concurrency"]
    holders: list[socket.socket] = []

    def saturated() -> bool:  # one more request held open at the gate, until the proxy refuses the next one
        if len(holders) < 4 * limit:
            sock = _connect(serve_url)
            sock.sendall(b"POST /g HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
            holders.append(sock)
        return httpx.get(f"{serve_url}/no-such-route").status_code == 503  # 404 while under the limit

    try:
        eventually(saturated)
        assert httpx.get(f"{serve_url}/-/healthz").status_code == 200  # health checks are never refused
        handle.open.remote().result(timeout=30)
        statuses = [_status(sock.recv(65536)) for sock in holders]
    finally:
        for sock in holders:
            sock.close()
    assert set(statuses) <= {200, 503} and statuses.count(200) == limit, statuses  # the limit held exactly
    eventually(lambda: httpx.get(f"{serve_url}/no-such-route").status_code == 404)
    serve.delete("gate")


def test_a_client_gone_mid_body_is_one_log_line(serve_url: str, caplog: pytest.LogCaptureFixture) -> None:
    serve.run(Plain.bind(), name="plain", route_prefix="/p")
    errors: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = errors.append  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    caplog.set_level(logging.INFO, logger="airflowless.serve.proxy")
    try:
        for _ in range(3):
            with _connect(serve_url) as sock:
                sock.sendall(b"POST /p HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"x\": 1")
                time.sleep(0)  # close with the body unfinished
        gone = eventually(lambda: [r for r in caplog.records if "disconnected after sending" in r.getMessage()])
        assert len(gone) <= 3 and all(r.exc_info is None and "\n" not in r.getMessage() for r in gone)
        assert httpx.post(f"{serve_url}/p", json=1).json() == 1
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert not [r for r in errors if r.levelno >= logging.ERROR], [r.getMessage() for r in errors]
    serve.delete("plain")


# -- stretch: a Starlette Request ingress, and responses passed to handles ------------------------------------

def test_an_ingress_taking_a_starlette_request(serve_url: str) -> None:
    serve.run(WithRequest.bind(), name="req", route_prefix="/r")
    reply = httpx.post(f"{serve_url}/r?k=v&n=2", json={"a": [1]}, headers={"X-Token": "t0k"})
    assert reply.json() == {"json": {"a": [1]}, "query": {"k": "v", "n": "2"}, "token": "t0k", "path": "/r",
                            "method": "POST"}
    assert httpx.post(f"{serve_url}/r/raw", content=b"\x00\xff" * 10).json() == {"bytes": 20}
    assert httpx.post(f"{serve_url}/r/raw", content=b"x" * (2 << 20)).status_code == 413
    serve.delete("req")


def test_answers_come_back_as_ray_serve_gives_them_and_sub_paths_reach_call(serve_url: str) -> None:
    serve.run(Answers.bind(), name="answers", route_prefix="/")
    text = httpx.get(f"{serve_url}/greet/there?kind=text")
    assert (text.status_code, text.text) == (200, "hello /greet/there")  # the text itself, not a JSON string
    assert text.headers["content-type"].startswith("text/plain")
    created = httpx.post(f"{serve_url}/items?kind=created", json={})
    assert (created.status_code, created.json(), created.headers["location"]) == (201, {"id": 7}, "/items/7")
    assert created.cookies["session"] == "abc"
    teapot = httpx.get(f"{serve_url}/?kind=plain")
    assert (teapot.status_code, teapot.text) == (418, "teapot")
    raw = httpx.get(f"{serve_url}/blob?kind=bytes")
    assert (raw.content, raw.headers["content-type"]) == (b"\x00\x01", "application/octet-stream")
    assert httpx.get(f"{serve_url}/a/b/c?x=1").json() == {"path": "/a/b/c", "query": {"x": "1"}}
    serve.delete("answers")


def test_a_response_passed_to_another_handle_is_resolved(serve_url: str) -> None:
    serve.run(Chain.bind(Pre.bind(), Post.bind()), name="chain", route_prefix="/chain")
    assert httpx.post(f"{serve_url}/chain", json={"x": [1, 2, 3.5]}).json() == {"sum": 6.5}  # inside a replica
    pre, post = serve.DeploymentHandle("chain", "Pre"), serve.DeploymentHandle("chain", "Post")
    assert post.remote(pre.remote({"x": [1, 4]})).result(timeout=30) == {"sum": 5.0}  # from the driver, sync

    async def composed() -> object:
        return await post.remote(values=pre.remote({"x": [2, 2]}))

    assert asyncio.run(composed()) == {"sum": 4.0}  # keyword arguments too
    serve.delete("chain")
