"""One test per function of airflowless._dask_internals, on a real cluster.

Each function there touches a private or undocumented part of distributed; a
distributed upgrade that breaks one fails here, by the function's name.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import Any

import pytest
from distributed import Client, Event, Future, get_worker

from airflowless import _dask_internals as internals
from airflowless.train.worker_group import is_rank_key, rank_key
from tests.support.eventually import eventually


def _blocker(name: str) -> str:
    Event(name).wait(60)
    return "done"


def test_current_task_key(cluster_client: Any) -> None:
    key = f"internals-key-{uuid.uuid4().hex}"
    assert cluster_client.submit(internals.current_task_key, key=key, pure=False).result(timeout=60) == key
    assert internals.current_task_key() is None  # not in a task


def test_sole_worker_in_process(cluster_client: Any) -> None:
    def own_address() -> str:
        return str(internals.sole_worker_in_process().address)

    found = cluster_client.run(own_address)
    assert found and all(address == own for address, own in found.items())
    assert internals.sole_worker_in_process() is None  # the driver hosts no worker


def test_inform_scheduler_of_futures(cluster_client: Any) -> None:
    held = cluster_client.scatter([41], hash=False)[0]

    def fetch(key: str) -> int:
        client = get_worker().client
        future: Future = Future(key, client=client)
        internals.inform_scheduler_of_futures(client)
        return int(client.gather(future)) + 1

    assert cluster_client.submit(fetch, held.key, pure=False).result(timeout=60) == 42


def test_forget_topic_handler(cluster_client: Any) -> None:
    topic = f"internals-topic-{uuid.uuid4().hex}"
    cluster_client.subscribe_topic(topic, lambda event: None)
    assert topic in cluster_client._event_handlers
    cluster_client.unsubscribe_topic(topic)
    internals.forget_topic_handler(cluster_client, topic)
    assert topic not in cluster_client._event_handlers
    internals.forget_topic_handler(cluster_client, topic)  # twice is harmless


def test_wait_for_signals() -> None:
    async def main() -> str:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(internals.wait_for_signals(), timeout=30)
        return "signalled"

    before = signal.getsignal(signal.SIGTERM)
    assert asyncio.run(main()) == "signalled"
    assert signal.getsignal(signal.SIGTERM) == before  # our handler is put back


def test_worker_addresses(cluster_client: Any) -> None:
    addresses = internals.worker_addresses(cluster_client)
    assert len(addresses) == 2
    assert set(addresses) == set(cluster_client.scheduler_info(n_workers=-1)["workers"])


def test_worker_resources(cluster_client: Any) -> None:
    stop = f"internals-stop-{uuid.uuid4().hex}"
    key = rank_key("Internals", 0, uuid.uuid4().hex)
    assert is_rank_key(key) and not is_rank_key("load-block-3")
    future = cluster_client.submit(_blocker, stop, key=key, pure=False)
    try:
        def hosting() -> list[str]:
            found = internals.worker_resources(cluster_client, is_rank_key)
            assert set(found) == set(internals.worker_addresses(cluster_client))
            for total, used, _ in found.values():
                assert isinstance(total, dict) and isinstance(used, dict)
            return [addr for addr, (_, _, busy) in found.items() if busy]

        assert len(eventually(hosting)) == 1
    finally:
        Event(stop, client=cluster_client).set()
    assert future.result(timeout=60) == "done"


def test_task_states(cluster_client: Any) -> None:
    stop = f"internals-stop-{uuid.uuid4().hex}"
    future = cluster_client.submit(_blocker, stop, pure=False)
    try:
        def processing() -> Any:
            state = internals.task_states(cluster_client, [str(future.key)])[str(future.key)]
            return state if state[0] == "processing" else None

        state, where, needs = eventually(processing)
        assert where in internals.worker_addresses(cluster_client)
        assert needs == {}
    finally:
        Event(stop, client=cluster_client).set()
    assert future.result(timeout=60) == "done"
    assert internals.task_states(cluster_client, ["no-such-key"]) == {"no-such-key": ("released", None, None)}


def test_scheduler_identity(cluster_client: Any) -> None:
    async def main() -> set[str]:
        async with Client(cluster_client.scheduler.address, asynchronous=True, set_as_default=False) as client:
            identity = await internals.scheduler_identity(client)
            return set(identity["workers"])

    assert asyncio.run(main()) == set(internals.worker_addresses(cluster_client))


@pytest.mark.parametrize("value", [{"max_ongoing": 4}, None])
def test_get_and_set_scheduler_metadata(cluster_client: Any, value: Any) -> None:
    key = ["airflowless-internals", uuid.uuid4().hex]

    async def write_then_read(dask_worker: Any) -> Any:
        assert await internals.get_scheduler_metadata(dask_worker, key, "unset") == "unset"
        await internals.set_scheduler_metadata(dask_worker, key, value)
        return await internals.get_scheduler_metadata(dask_worker, key)

    worker = internals.worker_addresses(cluster_client)[0]
    assert cluster_client.run(write_then_read, workers=[worker]) == {worker: value}
    assert cluster_client.get_metadata(key) == value
