"""Replica death under load, autoscaling with real load, and a clean shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time

import httpx

from airflowless import serve

from .deployments import Busy, Worky


async def _load(url: str, seconds: float, concurrency: int, stats: dict[str, int]) -> None:
    stop = time.monotonic() + seconds

    async def one(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            try:
                code = (await client.post(url, json={})).status_code
            except httpx.HTTPError:
                code = 0
            stats[str(code)] = stats.get(str(code), 0) + 1

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(one(client) for _ in range(concurrency)))


def _wait(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_killing_a_replicas_worker_under_load(serve_url: str, cluster_client: object) -> None:
    serve.run(Worky.bind(), name="worky", route_prefix="/worky")
    url = f"{serve_url}/worky"
    pids = {httpx.post(url, json={}).json()["pid"] for _ in range(20)}
    assert len(pids) == 2
    victim = sorted(pids)[0]
    stats: dict[str, int] = {}
    loader = threading.Thread(target=lambda: asyncio.run(_load(url, 6.0, 8, stats)))
    loader.start()
    time.sleep(1.5)
    os.kill(victim, signal.SIGKILL)
    loader.join()
    total = sum(stats.values())
    errors = total - stats.get("200", 0)
    print(f"\nreplica death under load: {total} requests, {errors} errors ({errors / total:.2%}) {stats}")
    assert stats.get("200", 0) > 100 and errors / total < 0.05
    assert _wait(lambda: serve.status()["worky"]["deployments"]["Worky"]["running_replicas"] == 2, 40)
    after = {httpx.post(url, json={}).json()["pid"] for _ in range(30)}
    assert victim not in after  # the replacement may share the surviving worker until the nanny restarts one
    serve.delete("worky")


def test_autoscaling_up_under_load_and_back_down(serve_url: str) -> None:
    serve.run(Busy.bind(), name="busy", route_prefix="/busy")

    def replicas() -> int:
        return int(serve.status()["busy"]["deployments"]["Busy"]["running_replicas"])

    assert replicas() == 1
    stats: dict[str, int] = {}
    loader = threading.Thread(target=lambda: asyncio.run(_load(f"{serve_url}/busy", 5.0, 12, stats)))
    loader.start()
    went_up = _wait(lambda: replicas() == 2, 5.0)
    loader.join()
    assert went_up, serve.status()
    assert _wait(lambda: replicas() == 1, 10.0), serve.status()
    assert stats.get("200", 0) > 0 and set(stats) == {"200"}
    serve.delete("busy")


def test_shutdown_leaves_no_threads_or_ports(cluster_client: object) -> None:
    before = {t.name for t in threading.enumerate()}
    serve.start(http_options={"port": 0})
    port = int(serve.http_address().rsplit(":", 1)[1])
    serve.run(Busy.bind(), name="tmp", route_prefix="/tmp")
    assert httpx.post(f"http://127.0.0.1:{port}/tmp", json={}).status_code == 200
    serve.shutdown()
    assert not any(t.name == "airflowless-serve" for t in threading.enumerate())
    assert {t.name for t in threading.enumerate() if t.is_alive()} - before <= {"asyncio_0"}
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    s2 = socket.socket()
    s2.bind(("127.0.0.1", port))  # and the port is free again
    s2.close()
