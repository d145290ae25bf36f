"""The replica data plane under hostile peers: raw sockets against a real replica's port.

A peer without the token gets nothing read past a fixed-size hello (so no
frame length is trusted before authentication); an authenticated peer cannot
make the replica buffer an oversized frame; idle unauthenticated connections
are capped and closed; a client never unpickles what an impostor answers; a
request that cannot be sent leaves no pending future behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import pickle
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from airflowless import serve
from airflowless.serve.errors import ServeError
from airflowless.serve.replica_table import ReplicaInfo
from airflowless.serve.router import Router
from airflowless.serve.wire import MAGIC, MAX_UNAUTHENTICATED, Rejected, WireClient
from tests.support.eventually import eventually

from .deployments import Slow, double

MiB = 1 << 20


@pytest.fixture(scope="module")
def replica(serve_url: str, cluster_client: Any) -> Iterator[ReplicaInfo]:
    serve.run(double.bind(), name="wired", route_prefix="/wired")
    assert httpx.post(f"{serve_url}/wired", json={"x": 1}).json() == {"y": 2}  # the proxy's connection is up
    table = cluster_client.get_metadata(["airflowless-serve", "wired", "double"])
    yield ReplicaInfo(*table["replicas"][0])
    serve.delete("wired")


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset by the peer
        return True


def _flood(sock: socket.socket, first: bytes, total: int) -> int:
    """Send ``first`` then zeros up to ``total`` bytes; how many were sent before the peer closed."""
    sock.settimeout(60)
    chunk = b"\0" * MiB
    sent = 0
    try:
        sock.sendall(first)
        while sent < total:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    return sent


def _peak_rss_while(pid: int, action: Callable[[], int]) -> tuple[int, int]:
    """Run ``action``; return its result and the largest RSS growth of process ``pid`` meanwhile."""
    process = psutil.Process(pid)
    base = process.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            done.wait(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = action()
    finally:
        done.set()
        sampler.join()
    return result, peak[0] - base


def _authenticate(sock: socket.socket, token: bytes) -> None:
    """The client side of the handshake, by hand."""
    nonce = os.urandom(16)
    sock.sendall(MAGIC + nonce)
    answer = b""
    while len(answer) < 48:
        answer += sock.recv(48 - len(answer))
    server_nonce, proof = answer[:16], answer[16:]
    assert hmac.compare_digest(proof, hmac.new(token, b"server" + nonce + server_nonce, hashlib.sha256).digest())
    sock.sendall(hmac.new(token, b"client" + server_nonce + nonce, hashlib.sha256).digest())
    assert sock.recv(1) == b"\x01"


def test_a_peer_without_the_token_cannot_make_the_replica_buffer(replica: ReplicaInfo, serve_url: str) -> None:
    with socket.create_connection((replica.host, replica.port)) as sock:
        sent, grew = _peak_rss_while(replica.pid, lambda: _flood(sock, struct.pack("!I", 300 * MiB), 300 * MiB))
    print(f"\nno token, a 300 MiB frame: {sent / MiB:.0f} MiB sent before the replica closed; "
          f"worker RSS +{grew / MiB:.1f} MiB")
    assert sent < 300 * MiB  # closed after the hello, not read to the end
    assert grew < 64 * MiB
    assert httpx.post(f"{serve_url}/wired", json={"x": 2}).json() == {"y": 4}


def test_an_authenticated_peer_cannot_send_an_oversized_frame(replica: ReplicaInfo) -> None:
    with socket.create_connection((replica.host, replica.port)) as sock:
        _authenticate(sock, replica.token)
        header = struct.pack("!IQB", 2**32 - 1, 1, 0)  # a 4 GiB frame
        sent, grew = _peak_rss_while(replica.pid, lambda: _flood(sock, header, 600 * MiB))
        print(f"\nauthenticated, a 4 GiB frame: {sent / MiB:.0f} MiB sent before the replica closed; "
              f"worker RSS +{grew / MiB:.1f} MiB")
        assert sent < 600 * MiB and grew < 64 * MiB
        assert eventually(lambda: _closed(sock))


def test_a_wrong_proof_is_refused(replica: ReplicaInfo) -> None:
    with socket.create_connection((replica.host, replica.port)) as sock:
        sock.sendall(MAGIC + os.urandom(16))
        assert len(sock.recv(48)) > 0
        sock.sendall(os.urandom(32))  # not the HMAC of the token
        assert eventually(lambda: _closed(sock))


def test_idle_unauthenticated_connections_are_capped_and_closed(replica: ReplicaInfo, serve_url: str) -> None:
    idle = [socket.create_connection((replica.host, replica.port)) for _ in range(MAX_UNAUTHENTICATED)]
    try:
        with socket.create_connection((replica.host, replica.port)) as extra:
            assert eventually(lambda: _closed(extra))  # over the cap: closed without waiting
            still_open = sum(not _closed(s) for s in idle)
        assert still_open > 0, "the extra connection should be refused before the others time out"
        # the connections already authenticated keep serving meanwhile
        assert httpx.post(f"{serve_url}/wired", json={"x": 3}).json() == {"y": 6}
        assert eventually(lambda: all(_closed(s) for s in idle), timeout=60)  # the handshake deadline
    finally:
        for sock in idle:
            sock.close()
    assert httpx.post(f"{serve_url}/wired", json={"x": 4}).json() == {"y": 8}


class _Touch:
    """Unpickling this creates a file: what an impostor's answer could do to a client that trusts it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (str(self.path),))


def test_a_client_never_unpickles_what_an_impostor_answers(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    payload = pickle.dumps((1, True, _Touch(marker)))
    frame = struct.pack("!I", len(payload)) + payload + b"\0" * 64  # an answer in any framing
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def impostor() -> None:  # took over the port of a replica that is gone
        for _ in range(5):
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(frame)
                conn.settimeout(2)
                try:
                    while conn.recv(65536):
                        pass
                except OSError:
                    pass

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    info = ReplicaInfo("app/M#1", "127.0.0.1", port, os.urandom(32), 1, "tcp://127.0.0.1:1")

    async def go() -> None:
        with pytest.raises(Rejected, match="is not"):
            await WireClient.connect(info.host, info.port, info.token, label="replica app/M#1")
        router = Router("app/M", max_ongoing=4, max_queued=4)
        router.update([info])
        with pytest.raises(ServeError):
            await router.call("__call__", ({"x": 1},), {}, timeout=5)

    try:
        asyncio.run(go())
    finally:
        server.close()
    assert not marker.exists()


def test_a_request_that_cannot_be_sent_leaves_nothing_pending(replica: ReplicaInfo, serve_url: str) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]

    async def go() -> None:
        client = await WireClient.connect(replica.host, replica.port, replica.token)
        try:
            for _ in range(3):
                with pytest.raises(ServeError, match="pickle"):
                    await client.call("__call__", (deep,), {})
            with pytest.raises(ServeError, match="pickle"):
                await client.call("__call__", (threading.Lock(),), {})
            with pytest.raises(TimeoutError):  # a caller that stops waiting
                await asyncio.wait_for(client.call("__call__", ({"x": 1},), {}), 0)
            assert client.pending == 0
            assert await client.call("__call__", ({"x": 5},), {}) == {"y": 10}  # the connection lives on
            assert client.pending == 0
        finally:
            await client.close()

    asyncio.run(go())


def test_a_request_the_replica_cannot_unpickle_fails_alone(serve_url: str, cluster_client: Any) -> None:
    serve.run(Slow.bind(), name="slowwire", route_prefix=None)
    table = cluster_client.get_metadata(["airflowless-serve", "slowwire", "Slow"])
    info = ReplicaInfo(*table["replicas"][0])

    async def go() -> None:
        client = await WireClient.connect(info.host, info.port, info.token)
        try:
            with pytest.raises(Exception, match="tests_not_importable"):
                await client.call("__call__", (_NotOnWorkers(),), {})
            assert await client.call("__call__", ({},), {}) == {"ok": True}  # same connection
        finally:
            await client.close()

    try:
        asyncio.run(go())
    finally:
        serve.delete("slowwire")


class _NotOnWorkers:
    """Pickled by reference to a module the workers cannot import."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (__import__, ("tests_not_importable",))
