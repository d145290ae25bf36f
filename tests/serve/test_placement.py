"""A replica placed on a worker that has just left the cluster: its start fails at once and the next lands on a
worker that is there.

The race CI met once: the only worker SIGKILLed, the scheduler still listing it when the controller placed the
replacement; its task, bound to that address, waited for ever (a nanny's new worker has another address), and
the deployment stayed without a replica for minutes. Here the scheduler's listing is made stale on purpose,
once, with a worker that does not exist.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from airflowless import serve
from airflowless.serve import driver

from .deployments import Echo

GONE = "tcp://127.0.0.1:1"  # sorts before any real worker's address: the placement picks it


def test_a_replica_placed_on_a_worker_that_left_starts_again_elsewhere(serve_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = driver.scheduler_identity
    stale: list[int] = []

    async def once_stale(client: Any) -> dict[str, Any]:
        identity = await real(client)
        if not stale:  # the first listing (the replica's placement) still names a worker that is gone
            stale.append(1)
            workers = identity.get("workers", {})
            some = next(iter(workers.values()))
            identity = {**identity, "workers": {**workers, GONE: {**some, "id": "gone"}}}
        return identity

    monkeypatch.setattr(driver, "scheduler_identity", once_stale)
    serve.run(Echo.bind("!"), name="placed", route_prefix="/placed", timeout_s=60)  # before the fix: 300 s, then fails
    assert stale, "the placement did not ask the scheduler for its workers"
    reply = httpx.post(f"{serve_url}/placed", json={"a": 1}, timeout=30)
    assert reply.status_code == 200 and reply.json()["got"] == {"a": 1}
    serve.delete("placed")
