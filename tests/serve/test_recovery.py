"""A deployment outlives the restart of its only worker: a cluster of its own, a real `serve run`, SIGKILL.

While no worker can take a replica, requests fail at once with a 503 that says
why (not after the 30 s queue timeout); once the nanny has brought the worker
back, the deployment runs again without anyone redeploying it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airflowless.runtime.processes import ProcessCluster
from airflowless.serve.errors import UnavailableError
from airflowless.serve.router import Router
from tests.support.eventually import eventually
from tests.support.process_cluster import process_cluster_fixture

one_worker = process_cluster_fixture(n_workers=1, resources={"CPU": 1})

APP = '''\
import os

from airflowless import serve


@serve.deployment(health_check_period_s=0.5)
def whoami(body):
    return {"pid": os.getpid()}


app = whoami.bind()
'''


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(one_worker: ProcessCluster, tmp_path: Path) -> Iterator[str]:
    """``airflowless serve run`` of APP on the one-worker cluster; its URL."""
    module = tmp_path / "whoami_app.py"
    module.write_text(APP)
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home")}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "airflowless.cli", "serve", "run", f"{module}:app",
                                 "--name", "whoami", "--port", str(port), "--address", one_worker.address],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, f"serve run exited {proc.returncode}:\n{log.read_text()}"
        try:
            return "press Ctrl+C" in log.read_text() and httpx.get(f"{url}/-/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        eventually(up, timeout=180, message=lambda: log.read_text())
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_only_worker_restarting_under_load(served: str) -> None:
    first = httpx.post(served, json={}, timeout=30).json()["pid"]
    replies: list[tuple[int, float, str]] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    reply = client.post(served, json={})
                    replies.append((reply.status_code, time.monotonic() - began, reply.text))
                except httpx.HTTPError as exc:
                    replies.append((0, time.monotonic() - began, repr(exc)))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: len(replies) > 20)
        os.kill(first, signal.SIGKILL)  # the worker process; its nanny starts a new one
        killed_at = len(replies)

        def serving_again() -> bool:
            later = replies[killed_at:]
            return any(code == 200 and str(first) not in text for code, _, text in later[-20:])

        eventually(serving_again, timeout=180, message=lambda: f"{replies[-3:]}")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    after = replies[killed_at:]
    waiting = [(elapsed, text) for code, elapsed, text in after if code == 503 and "no running replica" in text]
    codes = {code for code, _, _ in after}
    print(f"\nonly worker killed under load: {len(after)} requests after the kill, statuses {sorted(codes)}, "
          f"{len(waiting)} fast 503s (slowest {max((e for e, _ in waiting), default=0):.3f} s), "
          f"slowest request {max(e for _, e, _ in after):.2f} s")
    assert waiting, f"expected 503s that say why while no worker was there; got {after[:5]}"
    why = waiting[0][1]  # no worker yet, or the replica's start on the killed worker failed as it left
    assert "no worker has resources" in why or "left the cluster while replica" in why, why
    assert codes <= {200, 503}
    new = httpx.post(served, json={}, timeout=30).json()["pid"]
    assert new != first


def test_a_router_told_why_there_is_no_replica_fails_queued_and_new_calls_at_once() -> None:
    import asyncio

    async def go() -> None:
        router = Router("app/M", max_ongoing=1, max_queued=10)
        queued = asyncio.ensure_future(router.call("__call__", (), {}, timeout=600))
        await asyncio.sleep(0)
        assert router.queued == 1
        router.update([], unavailable="no worker has resources {'GPU': 1} free")
        with pytest.raises(UnavailableError, match="GPU"):
            await queued
        with pytest.raises(UnavailableError, match="no running replica"):
            await router.call("__call__", (), {}, timeout=600)
        router.update([])  # a replacement is starting: calls wait for it again
        waiting = asyncio.ensure_future(router.call("__call__", (), {}, timeout=600))
        await asyncio.sleep(0)
        assert router.queued == 1
        waiting.cancel()

    asyncio.run(go())
