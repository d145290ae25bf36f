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


def _wait_where(name: str) -> str:
    Event(name).wait(60)
    return str(get_worker().address)


def _steal_waiting(dask_scheduler: Any, keys: list[str], thief: str) -> int:
    """Ask the victim to give up every task of ``keys`` that it holds but has not started,
    the way work stealing's balance() does; returns how many requests were sent."""
    stealing = dask_scheduler.extensions["stealing"]
    sent = 0
    for key in keys:
        ts = dask_scheduler.tasks[key]
        if ts.processing_on is not None and ts.processing_on.address != thief:
            stealing.move_task_request(ts, ts.processing_on, dask_scheduler.workers[thief])
            sent += 1
    return sent


def test_worker_resources_in_use_survive_work_stealing(cluster_client: Any) -> None:
    # tasks holding a CPU, all placed on one worker, where one runs and the rest wait for
    # its CPU; the other worker steals the waiting ones. Once all ended, no worker counts
    # a CPU in use (distributed's used_resources would: +n on one, -n on the other).
    # Stealing is asked for explicitly: the balance() heuristic may or may not pick them (it may
    # also have moved some already by the time all are processing: the explicit requests cover the rest).
    first, thief = internals.worker_addresses(cluster_client)
    stop = f"internals-stop-{uuid.uuid4().hex}"
    futures = [cluster_client.submit(_wait_where, stop, workers=[first], allow_other_workers=True,
                                     resources={"CPU": 1}, pure=False) for _ in range(4)]
    keys = [str(future.key) for future in futures]
    try:
        eventually(lambda: all(state == "processing" and where in (first, thief)
                               for state, where, _ in internals.task_states(cluster_client, keys).values()))
        moved = sum(where == thief for _, where, _ in internals.task_states(cluster_client, keys).values())
        assert cluster_client.run_on_scheduler(_steal_waiting, keys=keys, thief=thief) + moved >= 4
        # the running task is refused; those waiting for the CPU move
        eventually(lambda: any(where == thief for _, where, _ in internals.task_states(cluster_client, keys).values()))
    finally:
        Event(stop, client=cluster_client).set()
    ran_on = cluster_client.gather(futures)
    assert thief in ran_on and first in ran_on
    found = internals.worker_resources(cluster_client, is_rank_key)
    assert {addr: used.get("CPU") for addr, (_, used, _) in found.items()} == {addr: 0.0 for addr in found}


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


def test_topic_subscribers_and_trim_topic(cluster_client: Any) -> None:
    topic = f"airflowless-internals-{uuid.uuid4().hex}"

    def subscribers(dask_scheduler: Any) -> set[str]:
        return internals.topic_subscribers(dask_scheduler, topic)

    def trim_and_count(dask_scheduler: Any) -> int:
        internals.trim_topic(dask_scheduler, topic)
        return len(dask_scheduler.get_events(topic))

    assert cluster_client.run_on_scheduler(subscribers) == set()
    cluster_client.subscribe_topic(topic, lambda event: None)
    try:
        eventually(lambda: cluster_client.run_on_scheduler(subscribers) == {cluster_client.id})
        cluster_client.log_event(topic, {"n": 1})
        eventually(lambda: len(cluster_client.get_events(topic)) == 1)
        assert cluster_client.run_on_scheduler(trim_and_count) == 0
    finally:
        cluster_client.unsubscribe_topic(topic)
        internals.forget_topic_handler(cluster_client, topic)
    eventually(lambda: cluster_client.run_on_scheduler(subscribers) == set())


def _topics(dask_scheduler: Any, prefix: str) -> list[str]:
    return [name for name in dask_scheduler._broker._topics if name.startswith(prefix)]


def test_close_topic_forgets_the_topic_and_its_events_once_no_client_listens(cluster_client: Any) -> None:
    topic = f"airflowless-internals-{uuid.uuid4().hex}"
    with Client(cluster_client.scheduler.address, set_as_default=False) as other:
        for client in (cluster_client, other):
            client.subscribe_topic(topic, lambda event: None)

        def subscribers(dask_scheduler: Any) -> set[str]:
            return internals.topic_subscribers(dask_scheduler, topic)

        eventually(lambda: cluster_client.run_on_scheduler(subscribers) == {cluster_client.id, other.id})
        cluster_client.log_event(topic, {"n": 1})
        eventually(lambda: len(cluster_client.get_events(topic)) == 1)
        internals.close_topic(cluster_client, topic)
        assert topic not in cluster_client._event_handlers
        assert cluster_client.run_on_scheduler(_topics, prefix=topic) == [topic]  # the other client listens
        assert len(other.get_events(topic)) == 1
        internals.close_topic(other, topic)
    assert cluster_client.run_on_scheduler(_topics, prefix=topic) == []
    internals.close_topic(cluster_client, topic)  # twice is harmless


def _dashboard(client: Any) -> tuple[Any, str]:
    """The embedded cluster's scheduler object and its dashboard's base URL."""
    scheduler = client.cluster.scheduler
    return scheduler, client.dashboard_link.rsplit("/", 1)[0] + "/"


def test_add_dashboard_nav_entry(cluster_client: Any) -> None:
    import urllib.request

    scheduler, base = _dashboard(cluster_client)
    internals.add_dashboard_nav_entry(scheduler, "airflowless", [("airflowless/runs", "Airflowless Runs")])
    internals.add_dashboard_nav_entry(scheduler, "airflowless", [("airflowless/runs", "Airflowless Runs")])
    with urllib.request.urlopen(base + "status", timeout=30) as response:  # a Bokeh page, rendered now
        html = response.read().decode()
    assert html.count('<a href="airflowless">Airflowless</a>') == 1  # in the navigation bar, once
    assert html.count('<a href="airflowless/runs">Airflowless Runs</a>') == 1  # in "More..."
    assert '<a href="workers">Workers</a>' in html  # distributed's own entries are still there


def test_individual_plots_handler(cluster_client: Any) -> None:
    import json
    import urllib.request

    scheduler, base = _dashboard(cluster_client)
    path = f"/individual-plots-{uuid.uuid4().hex[:8]}.json"
    handler = internals.individual_plots_handler({"Airflowless Test": "/airflowless/test"})
    scheduler.http_application.add_handlers(r".*$", [(path, handler, {"dask_server": scheduler})])
    with urllib.request.urlopen(base + path.lstrip("/"), timeout=30) as response:
        plots = json.loads(response.read())
    assert plots["Airflowless Test"] == "/airflowless/test"
    assert plots["Individual Task Stream"] == "/individual-task-stream"  # distributed's list is kept


def _echo_handler(**kwargs: Any) -> dict[str, Any]:
    return kwargs


def test_add_scheduler_handlers(cluster_client: Any) -> None:
    name = f"airflowless_test_echo_{uuid.uuid4().hex[:8]}"
    internals.add_scheduler_handlers(cluster_client.cluster.scheduler, {name: _echo_handler})
    answer = cluster_client.sync(getattr(cluster_client.scheduler, name), value=3)
    assert answer == {"value": 3}


def test_resource_view(cluster_client: Any) -> None:
    gate = f"internals-view-{uuid.uuid4().hex}"
    held = cluster_client.submit(_blocker, gate, resources={"CPU": 1}, pure=False)
    lost = cluster_client.submit(_blocker, gate, resources={"NO-SUCH": 1}, pure=False)
    try:
        def view() -> Any:
            return internals.resource_view(cluster_client.cluster.scheduler)

        totals, processing, unrunnable = eventually(
            lambda: (found := view()) and any(found[1]) and found[2] and found, timeout=30)
        assert all(total.get("CPU") == 1.0 for total in totals)
        assert [{"CPU": 1}] in processing  # the held task, on the worker that runs it
        assert unrunnable == [{"NO-SUCH": 1}]  # no worker offers it
    finally:
        Event(gate, client=cluster_client).set()
        held.result(timeout=60)
        cluster_client.cancel([lost])


class _Counter:
    def __init__(self) -> None:
        self.n = 0


def test_without_actors(cluster_client: Any) -> None:
    future = cluster_client.submit(_Counter, actor=True, pure=False)
    future.result(timeout=60)
    try:
        host = cluster_client.who_has(future)[future.key][0]
        workers = list(cluster_client.cluster.scheduler.workers.values())
        kept = internals.without_actors(workers)
        assert {ws.address for ws in kept} == {ws.address for ws in workers} - {host}
    finally:
        cluster_client.cancel([future])


def test_require_http_client_certificates(tmp_path: Any) -> None:
    import ssl

    import dask.config
    from distributed import Scheduler

    from airflowless.runtime import tls

    files = tls.generate(tmp_path / "certs")

    async def start(config: dict[str, str]) -> tuple[bool, Any]:
        with dask.config.set(config):
            async with Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0") as scheduler:
                changed = internals.require_http_client_certificates(scheduler)
                return changed, getattr(scheduler.http_server, "ssl_options", None)

    changed, context = asyncio.run(start(tls.dashboard_config(files, "scheduler")))
    assert changed and isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert asyncio.run(start({}))[0] is False  # a plain HTTP dashboard: nothing to require


def test_extend_adaptive_target() -> None:
    from distributed import Scheduler

    async def scenario() -> tuple[int, int]:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0") as scheduler:
            internals.extend_adaptive_target(scheduler, lambda dask_target: dask_target + 5)
            async with Client(scheduler.address, asynchronous=True) as client:
                return scheduler.adaptive_target(), await client.scheduler.adaptive_target()

    assert asyncio.run(scenario()) == (5, 5)


def test_quiet_compute_failed(cluster_client: Any) -> None:
    def raises_stage_failed() -> None:
        from airflowless.errors import StageFailedError

        raise StageFailedError("stage", "boom", "Traceback ...")

    def raises_value_error() -> None:
        raise ValueError("not a stage")

    def records_of(fn: Any) -> list[str]:
        """The "Compute Failed" records the worker's logger let through while ``fn`` failed there."""

        def install(dask_worker: Any) -> None:
            import logging

            class Keep(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    kept.append(record.getMessage())

            kept: list[str] = []
            handler = Keep()
            logging.getLogger("distributed.worker").addHandler(handler)
            dask_worker._test_kept = (handler, kept)

        def collect(dask_worker: Any) -> list[str]:
            import logging

            handler, kept = dask_worker._test_kept
            logging.getLogger("distributed.worker").removeHandler(handler)
            return [message for message in kept if message.startswith("Compute Failed")]

        worker = next(iter(cluster_client.scheduler_info()["workers"]))
        cluster_client.run(install, workers=[worker])
        future = cluster_client.submit(fn, workers=[worker], pure=False)
        with pytest.raises(Exception):  # noqa: B017 - either error: only the log matters here
            future.result(timeout=60)
        return cluster_client.run(collect, workers=[worker])[worker]

    assert records_of(raises_stage_failed) == []  # the plugin installed the filter on every worker
    kept = records_of(raises_value_error)
    assert len(kept) == 1 and "ValueError('not a stage')" in kept[0]
