"""A hung request never takes a deployment down: request timeouts (504), client disconnects, stuck replicas.

The proxy cancels a call whose client left or whose ``request_timeout_s``
passed; the replica cancels it too (an ``async`` method at its next
``await``); a plain ``def`` method that cannot be interrupted makes its replica
refuse new work and be replaced. Real processes throughout: the session's
cluster, the HTTP proxy on loopback, httpx clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from airflowless import serve
from tests.support.eventually import eventually
from tests.support.load import http_load

from .deployments import HangsAsync, HangsSync

TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def url(cluster_client: object) -> Iterator[str]:
    serve.start(http_options={"port": 0, "request_timeout_s": TIMEOUT_S})
    yield serve.http_address()
    serve.shutdown()


def _replicas(url: str, n: int = 40) -> set[str]:
    return {httpx.post(url, json={}, timeout=30).json()["replica"] for _ in range(n)}


def test_a_hung_sync_call_gets_504_and_its_replica_is_replaced(url: str) -> None:
    serve.run(HangsSync.bind(), name="hangs-sync", route_prefix="/sync")
    target = f"{url}/sync"
    before = _replicas(target)
    assert len(before) == 2

    with http_load(target, concurrency=4) as stats:
        eventually(lambda: stats.get("200", 0) > 20, message=lambda: f"load before the hang: {stats}")
        started = time.monotonic()
        hung = httpx.post(target, json={"hang": 60}, timeout=30)
        took = time.monotonic() - started
        assert hung.status_code == 504, hung.text
        assert "did not answer within 1.5 s" in hung.json()["error"]
        assert TIMEOUT_S <= took < TIMEOUT_S + 5, took

        def replaced() -> bool:
            status = serve.status()["hangs-sync"]["deployments"]["HangsSync"]
            return status["running_replicas"] == 2 and len(_replicas(target, 20) - before) == 1

        eventually(replaced, timeout=60, message=lambda: f"{serve.status()} {stats}")
        served = stats.get("200", 0)
        eventually(lambda: stats.get("200", 0) > served + 50, message=lambda: f"load after: {stats}")

    # once replaced, every request is answered, and fast: nothing waits behind the stuck thread
    for _ in range(30):
        started = time.monotonic()
        assert httpx.post(target, json={}, timeout=30).status_code == 200
        assert time.monotonic() - started < 1.0
    serve.delete("hangs-sync")


def test_calls_of_clients_that_left_are_cancelled(url: str) -> None:
    serve.run(HangsAsync.bind(), name="hangs-async", route_prefix="/async")
    target = f"{url}/async"
    # 3 rounds of 4 hanging requests whose clients give up after 0.3 s: without cancellation
    # the first round would hold all 4 slots (max_ongoing_requests) for ever
    for _ in range(3):
        with httpx.Client(timeout=0.3) as client:
            for _ in range(4):
                with pytest.raises(httpx.TimeoutException):
                    client.post(target, json={"hang": True})

        def all_cancelled() -> Any:
            counts = httpx.get(target, timeout=10).json()
            return counts if counts["running"] == 0 else None

        eventually(all_cancelled, timeout=20, message=lambda: httpx.get(target, timeout=10).text)
    assert httpx.get(target, timeout=10).json()["cancelled"] == 12
    assert httpx.post(target, json={}, timeout=10).json() == {"ok": True}

    # the request timeout cancels an async call too
    hung = httpx.post(target, json={"hang": True}, timeout=30)
    assert hung.status_code == 504, hung.text
    eventually(lambda: httpx.get(target, timeout=10).json()["cancelled"] == 13)
    serve.delete("hangs-async")


def test_request_timeout_option_is_checked() -> None:
    from airflowless.errors import ConfigError
    from airflowless.serve.http_options import HTTPOptions

    assert HTTPOptions().request_timeout_s == 60.0
    assert HTTPOptions(request_timeout_s=None).request_timeout_s is None
    with pytest.raises(ConfigError, match=r"request_timeout_s'\] must be a number of seconds > 0 \(or None"):
        HTTPOptions(request_timeout_s=0)
