"""runtime.topics.Subscription: workers' messages reach the driver, and a closed subscription leaves nothing behind
on the client or the scheduler (a real cluster; the workers publish with log_event)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from distributed import Client, get_worker

from airflowless import _dask_internals as internals
from airflowless.runtime.topics import Subscription
from tests.support.eventually import eventually


def _publish(topic: str, message: Any) -> None:
    get_worker().log_event(topic, message)


def _subscribers(dask_scheduler: Any, topic: str) -> set[str]:
    return internals.topic_subscribers(dask_scheduler, topic)


def _kept(dask_scheduler: Any, topic: str) -> bool:
    return topic in dask_scheduler._broker._topics


def _topic() -> str:
    return f"airflowless-test-{uuid.uuid4().hex}"


def test_a_handler_gets_each_message_until_closed_then_the_client_keeps_nothing(cluster_client: Any) -> None:
    topic, got = _topic(), []
    with Subscription(cluster_client, topic, got.append):
        eventually(lambda: cluster_client.run_on_scheduler(_subscribers, topic=topic) == {cluster_client.id})
        cluster_client.submit(_publish, topic, {"n": 1}, pure=False).result(timeout=60)
        eventually(lambda: len(got) == 1)
        assert got[0]["n"] == 1  # the message (a worker's names it), not Dask's (timestamp, message) pair
    assert topic not in cluster_client._event_handlers
    eventually(lambda: cluster_client.run_on_scheduler(_subscribers, topic=topic) == set())
    assert cluster_client.run_on_scheduler(_kept, topic=topic)  # not owned: the scheduler keeps the topic


def test_an_owned_topic_is_forgotten_by_the_scheduler_and_its_queue_holds_the_messages(cluster_client: Any) -> None:
    topic = _topic()
    reports = Subscription(cluster_client, topic, owned=True)
    eventually(lambda: cluster_client.run_on_scheduler(_subscribers, topic=topic) == {cluster_client.id})
    cluster_client.submit(_publish, topic, {"rank": 0, "loss": 0.5}, pure=False).result(timeout=60)
    assert reports.queue.get(timeout=30)["loss"] == 0.5
    reports.close()
    reports.close()  # twice is harmless
    assert topic not in cluster_client._event_handlers
    assert not cluster_client.run_on_scheduler(_kept, topic=topic)  # and every event it kept


def test_an_asynchronous_client_listens_and_unsubscribes(cluster_client: Any) -> None:
    topic = _topic()

    async def main() -> tuple[Any, set[str]]:
        async with Client(cluster_client.scheduler.address, asynchronous=True, set_as_default=False) as client:
            with Subscription(client, topic, owned=True) as messages:
                while await client.run_on_scheduler(_subscribers, topic=topic) != {client.id}:
                    await asyncio.sleep(0.05)
                await client.submit(_publish, topic, {"say": "hello"}, pure=False)
                while messages.queue.empty():
                    await asyncio.sleep(0.05)
                got = messages.queue.get_nowait()["say"]
            assert topic not in client._event_handlers
            for _ in range(200):
                left = await client.run_on_scheduler(_subscribers, topic=topic)
                if not left:
                    break
                await asyncio.sleep(0.05)
            return got, left

    assert asyncio.run(asyncio.wait_for(main(), 60)) == ("hello", set())


def test_an_event_after_the_handler_went_is_no_traceback(cluster_client: Any) -> None:
    """distributed answers a late event by unsubscribing, which raises for a topic without a handler, and logs
    that with a traceback; it reached a CLI run's console when the run failed (CI, stop 43)."""
    import logging

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger, handler = logging.getLogger("distributed.client"), Keep()
    logger.addHandler(handler)
    try:
        topic = _topic()
        Subscription(cluster_client, topic).close()
        with pytest.raises(ValueError, match="No event handler known") as late:
            cluster_client.sync(cluster_client._handle_event, topic, (0.0, {"late": True}))  # what the client does
        for error in (late.value, ValueError("something else")):
            logger.error(error, exc_info=(type(error), error, error.__traceback__))  # as _handle_report logs it
    finally:
        logger.removeHandler(handler)
    assert [str(record.msg) for record in seen] == ["something else"]
