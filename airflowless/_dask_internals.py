"""The one door to distributed's private or undocumented API.

Everything airflowless needs from distributed that has no public spelling lives
here, as one small named function each, and nowhere else: callers import these
names, never ``distributed._*`` or a ``_``-attribute of a Client, Worker or
Scheduler. Each function says what private thing it touches and why, and
``tests/test_dask_internals.py`` has a test per function on a real cluster, so a
distributed upgrade that breaks one fails there, by name.

To add one: a function here with that docstring, a test there, and the caller
importing it from this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def current_task_key() -> Any:
    """The key of the task running in this thread, or None outside a task.

    Touches ``distributed.worker.thread_state.key`` (undocumented): distributed has no
    public "which task am I" call, and the DAG runner needs it to ask the worker
    whether the driver still wants that task before retrying it.
    """
    from distributed.worker import thread_state

    return getattr(thread_state, "key", None)


def sole_worker_in_process() -> Any:
    """The one Worker this process hosts, or None (none, or several).

    Touches ``Worker._instances``: ``get_worker()`` only answers inside a task's own
    thread, while a thread a task started (a Tune trial's driver) must find its
    worker too.
    """
    from distributed import Worker

    workers = list(Worker._instances)
    return workers[0] if len(workers) == 1 else None


def inform_scheduler_of_futures(client: Any) -> None:
    """Tell the scheduler that ``client`` now wants the futures it holds.

    Touches ``Client._inform_scheduler_of_futures()``: futures built from bare keys
    (``Future(key, client=...)``) on a worker's client are not announced, so the
    scheduler never tells that client they are in memory (``Client.get_dataset``
    calls it for the same reason).
    """
    client._inform_scheduler_of_futures()


def forget_topic_handler(client: Any, topic: str) -> None:
    """Drop the handler ``Client.subscribe_topic`` registered for ``topic``.

    Touches ``Client._event_handlers``: ``Client.unsubscribe_topic`` tells the
    scheduler but leaves the handler on the client, which would keep it (and what
    it closes over) alive for the client's life.
    """
    getattr(client, "_event_handlers", {}).pop(topic, None)


async def wait_for_signals() -> None:
    """Wait until this process receives SIGINT or SIGTERM.

    Touches ``distributed._signals.wait_for_signals``: the worker entry point waits
    for a signal or its worker's end, as ``dask worker`` does, with the same helper.
    """
    from distributed._signals import wait_for_signals as wait

    await wait()


def worker_addresses(client: Any) -> list[str]:
    """The addresses of the workers the scheduler knows now.

    Reads ``Scheduler.workers`` through ``run_on_scheduler``: ``Client.scheduler_info()``
    returns a cache that the client's periodic refresh overwrites with no workers
    in it, so it cannot tell a lost worker in time.
    """
    return list(client.run_on_scheduler(_worker_addresses))


def _worker_addresses(dask_scheduler: Any) -> list[str]:
    return list(dask_scheduler.workers)


def worker_resources(client: Any, busy: Callable[[str], bool]
                     ) -> dict[str, tuple[dict[str, float], dict[str, float], bool]]:
    """Per worker address: (its resources, those in use, whether it processes a task whose key
    ``busy(key)`` accepts).

    Reads ``WorkerState.resources``, ``.used_resources`` and ``.processing`` through
    ``run_on_scheduler``: no public call reports the resources in use. ``busy`` runs on
    the scheduler, so it must be importable there (a module-level function).
    """
    def read(dask_scheduler: Any) -> Any:
        return {addr: (dict(ws.resources), dict(ws.used_resources),
                       any(busy(str(ts.key)) for ts in ws.processing))
                for addr, ws in dask_scheduler.workers.items()}

    return client.run_on_scheduler(read)  # type: ignore[no-any-return]


def task_states(client: Any, keys: list[str]) -> dict[str, tuple[str, str | None, dict[str, float] | None]]:
    """Per key: (its scheduler state, the worker processing it, its resource restrictions);
    ("released", None, None) for a key the scheduler does not hold.

    Reads ``Scheduler.tasks`` through ``run_on_scheduler``: no public call says why a
    task waits (``no-worker``, which resources it asked for).
    """
    return client.run_on_scheduler(_task_states, keys=keys)  # type: ignore[no-any-return]


def _task_states(dask_scheduler: Any, keys: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is None:
            out[key] = ("released", None, None)
            continue
        out[key] = (ts.state, ts.processing_on.address if ts.processing_on else None,
                    dict(ts.resource_restrictions or {}))
    return out


async def scheduler_identity(client: Any) -> dict[str, Any]:
    """The scheduler's identity (its workers, their resources), asked now of an asynchronous client.

    Calls the ``identity`` RPC through ``Client.scheduler`` (undocumented): an
    asynchronous client's ``Client.scheduler_info()`` returns its cached copy,
    which may not yet list a worker that just joined.
    """
    return await client.scheduler.identity(n_workers=-1)  # type: ignore[no-any-return]


async def get_scheduler_metadata(worker: Any, key: Any, default: Any = None) -> Any:
    """The scheduler metadata at ``key`` (``default`` when unset), asked from a worker's event loop.

    Calls the ``get_metadata`` RPC through ``Worker.scheduler`` (undocumented): the
    public ``Client.get_metadata`` would need an asynchronous client on the worker's
    loop, while the worker's own client is a blocking one.
    """
    return await worker.scheduler.get_metadata(keys=key, default=default)


async def set_scheduler_metadata(worker: Any, key: Any, value: Any) -> None:
    """Set the scheduler metadata at ``key`` from a worker's event loop.

    Calls the ``set_metadata`` RPC through ``Worker.scheduler``, for the reason
    :func:`get_scheduler_metadata` gives.
    """
    await worker.scheduler.set_metadata(keys=key, value=value)
