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

import logging
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


def close_topic(client: Any, topic: str) -> None:
    """Unsubscribe ``client`` from ``topic`` and drop its handler; when no other client listens,
    the scheduler forgets the topic and every event it kept.

    Edits ``Scheduler._broker._topics`` through ``run_on_scheduler``: the broker keeps
    each topic's events (up to ``distributed.scheduler.events-log-length``) and the
    topic itself for the scheduler's life, and no public call drops them. Each fit's
    ranks report on a topic of their own, so a long-lived cluster would keep every
    report of every fit. The unsubscription is made there too, not with
    ``Client.unsubscribe_topic``, whose message could arrive after the topic was
    dropped and make it again. For a synchronous client and a topic of one listener
    (a fit's, an experiment's): a client that listens again on the same topic could
    lose its new subscription to a close still on its way.
    """
    try:
        if client.status == "running":  # else the cluster is gone or going: nothing to tell it
            client.run_on_scheduler(_close_topic, topic=topic, subscriber=client.id)
    finally:
        forget_topic_handler(client, topic)


def _close_topic(dask_scheduler: Any, topic: str, subscriber: str) -> None:
    topics = dask_scheduler._broker._topics
    state = topics.get(topic)  # .get: never creates the topic
    if state is None:
        return
    state.unsubscribe(subscriber)
    if not state.subscribers:
        del topics[topic]


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

    Reads ``WorkerState.resources``, ``.processing`` and each processing task's
    ``resource_restrictions`` through ``run_on_scheduler``: no public call reports the
    resources in use. Not ``WorkerState.used_resources``: work stealing moves a task
    between workers without moving what it holds there (distributed 2026.8), so after
    a steal one worker counts a CPU for ever and the other one fewer. ``busy`` runs on
    the scheduler, so it must be importable there (a module-level function).
    """
    def read(dask_scheduler: Any) -> Any:
        found = {}
        for addr, ws in dask_scheduler.workers.items():
            used = {name: 0.0 for name in ws.resources}
            for ts in ws.processing:
                for name, amount in (ts.resource_restrictions or {}).items():
                    used[name] = used.get(name, 0.0) + amount
            found[addr] = (dict(ws.resources), used, any(busy(str(ts.key)) for ts in ws.processing))
        return found

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


def add_dashboard_nav_entry(scheduler: Any, page: str, plots: list[tuple[str, str]]) -> None:
    """Add ``page`` to the navigation bar of ``scheduler``'s dashboard, and ``plots``
    (``(relative url, label)`` pairs) to its "More..." menu. Nothing when the dashboard is off.

    Touches ``distributed.dashboard.scheduler.template_variables`` (undocumented): the
    dashboard's pages render their navigation from the ``pages`` and ``plots`` lists of
    that memoized dict (one per scheduler), and distributed has no public way to add a
    page to them. The lists are shared with the running dashboard, so appending is seen
    by every page opened afterwards.
    """
    if getattr(scheduler, "http_server", None) is None:
        return
    try:
        from distributed.dashboard.scheduler import template_variables
    except ImportError:  # no bokeh: distributed serves no dashboard pages
        return
    variables = template_variables(scheduler)
    if page not in variables["pages"]:
        variables["pages"].append(page)
    known = {plot["url"] for plot in variables["plots"]}
    variables["plots"].extend({"url": url, "name": name} for url, name in plots if url not in known)
    variables["plots"].sort(key=lambda plot: plot["name"])


def individual_plots_handler(extra: dict[str, str]) -> type:
    """A handler for ``/individual-plots.json`` answering distributed's list plus ``extra``
    (label -> path), for JupyterLab's Dask extension to offer those pages as panes.

    Subclasses ``distributed.http.scheduler.info.IndividualPlots`` (undocumented): the
    list is built there from the Bokeh applications and distributed's static files, and
    has no hook to add pages that are neither. Initialize it with ``dask_server=scheduler``.
    """
    from distributed.http.scheduler.info import IndividualPlots

    class _WithExtra(IndividualPlots):  # type: ignore[misc]
        def write(self, chunk: Any) -> None:
            if isinstance(chunk, dict):
                chunk = {**chunk, **extra}
            super().write(chunk)

    return _WithExtra


def require_http_client_certificates(server: Any) -> bool:
    """Make ``server``'s HTTP server (dashboard) refuse clients without a certificate from its CA.

    Touches ``server.http_server.ssl_options``, the ``ssl.SSLContext`` that
    ``distributed.node.ServerNode.start_http_server`` builds from
    ``distributed.scheduler.dashboard.tls.*`` with ``verify_mode`` CERT_NONE and no
    setting to change it; tornado wraps each new connection with that context,
    so requiring certificates on it applies from the next connection on.
    Returns whether the server listens with TLS (False: nothing to change).
    """
    import ssl

    context = getattr(getattr(server, "http_server", None), "ssl_options", None)
    if not isinstance(context, ssl.SSLContext):
        return False
    context.verify_mode = ssl.CERT_REQUIRED
    return True


def add_scheduler_handlers(scheduler: Any, handlers: dict[str, Callable[..., Any]]) -> None:
    """Answer RPC operations ``handlers`` names on ``scheduler`` (``rpc.<name>(**kwargs)`` calls them).

    Touches ``Server.handlers``: a scheduler plugin has no public way to add an
    operation clients and an adaptive loop can call (distributed's own extensions
    add theirs the same way).
    """
    scheduler.handlers.update(handlers)


def resource_view(scheduler: Any) -> tuple[list[dict[str, float]], list[list[dict[str, float]]], list[dict[str, float]]]:
    """From inside the scheduler: per worker its resources and the resource restrictions of the
    tasks it processes, and the restrictions of the tasks no worker can take (``no-worker``).

    Reads ``WorkerState.resources``, ``.processing``, ``TaskState.resource_restrictions``
    and ``Scheduler.unrunnable``: no public call says which tasks wait for resources.
    """
    totals, processing = [], []
    for ws in scheduler.workers.values():
        totals.append({k: float(v) for k, v in ws.resources.items()})
        processing.append([dict(ts.resource_restrictions) for ts in ws.processing if ts.resource_restrictions])
    unrunnable = [dict(ts.resource_restrictions) for ts in scheduler.unrunnable if ts.resource_restrictions]
    return totals, processing, unrunnable


def topic_subscribers(scheduler: Any, topic: str) -> set[str]:
    """From inside the scheduler: the ids of the connected clients subscribed to event ``topic``.

    Reads ``Scheduler._broker._topics`` (private): distributed has no public way to
    ask who listens on a topic, and a control-plane action must say so when no
    live driver would receive it. Subscriptions of clients that left are dropped
    here (the broker keeps them).
    """
    topic_state = scheduler._broker._topics.get(topic)  # .get: never creates the topic
    if topic_state is None:
        return set()
    return {client for client in topic_state.subscribers if client in scheduler.clients}


def trim_topic(scheduler: Any, topic: str) -> None:
    """From inside the scheduler: forget the events kept for ``topic`` (subscribers stay).

    Calls ``Scheduler._broker.truncate`` (private): the live feeds are published
    about once a second for as long as work runs, and the scheduler keeps every
    event of a topic up to ``distributed.scheduler.events-log-length``; the control
    plane keeps the latest of each itself and drops the rest.
    """
    scheduler._broker.truncate(topic)


def without_actors(workers: list[Any]) -> list[Any]:
    """The ``WorkerState`` objects among ``workers`` that host no actor (a serve replica is one).

    Reads ``WorkerState.actors``: downscaling plugins get worker states and no public
    call says which of them host actors, whose state dies with the worker.
    """
    return [ws for ws in workers if not ws.actors]


def extend_adaptive_target(scheduler: Any, extra: Callable[[int], int]) -> None:
    """Make ``scheduler.adaptive_target`` answer ``extra(dask_target)`` (for its RPC and its HTTP API).

    Replaces the ``adaptive_target`` attribute and RPC handler of this scheduler
    object: autoscalers outside the driver (the dask-kubernetes operator's
    ``DaskAutoscaler``) ask ``GET /api/v1/adaptive_target`` or the RPC, and
    distributed has no hook to add to that number.
    """
    original = scheduler.adaptive_target

    def adaptive_target(target_duration: Any = None) -> int:
        return extra(int(original(target_duration)))

    scheduler.adaptive_target = adaptive_target
    scheduler.handlers["adaptive_target"] = adaptive_target


def quiet_compute_failed(exception_names: tuple[str, ...]) -> None:
    """Drop the worker's "Compute Failed" log record for tasks that raised one of ``exception_names``.

    Touches the message and arguments of the record ``distributed.worker``
    logs when a task raises (undocumented: the fourth argument is the
    exception's repr). A failed stage's error is already told once, with the
    user's traceback, by the DAG runner; the worker's dump of the same error
    (the task's repr, the traceback again) only doubled it. Other tasks'
    failures are still logged. Idempotent.
    """
    def failed(record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return str(record.msg).startswith("Compute Failed") and len(args) >= 4 \
            and str(args[3]).startswith(exception_names)

    _drop_records(("distributed.worker",), "compute-failed", failed)


def quiet_late_topic_events() -> None:
    """Drop the traceback distributed logs for an event that reaches a client after its topic's handler went.

    ``Client._handle_event`` answers an event on a topic without a handler by
    calling ``unsubscribe_topic``, which raises ``ValueError("No event handler
    known for topic ...")`` for exactly that topic; ``Client._handle_report``
    logs it with a traceback on ``distributed.client``. An event already on
    its way when a :class:`~airflowless.runtime.topics.Subscription` closes
    meets it (a run's stage event as the run fails, on the user's console);
    the event was to be dropped, and is. Idempotent.
    """
    def late(record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return isinstance(error, ValueError) and str(error).startswith("No event handler known for topic")

    _drop_records(("distributed.client",), "late-topic-events", late)


def quiet_cancelled_waits() -> None:
    """Drop what distributed logs when work it waits on is cancelled, as by a Ctrl-C or a closing cluster.

    Two records, matched on their undocumented text: the scheduler's Event
    extension logs each ``event_wait`` cancelled by its client going away as
    an ERROR with a ``CancelledError`` traceback (``distributed.event``, through
    ``log_errors``), and a closing worker logs each async task it cancels as a
    WARNING, "Async instruction for <Task cancelled ...> ended with
    CancelledError" (``distributed.worker.state_machine``). Neither is an error:
    the run's own line says it was cancelled. Idempotent.
    """
    import asyncio

    def cancelled(record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            return True
        message = str(record.msg)
        return message.startswith("Async instruction for") and message.endswith("ended with CancelledError")

    _drop_records(("distributed.event", "distributed.worker.state_machine"), "cancelled-waits", cancelled)


class _Dropping(logging.Filter):
    """Drops the records ``drop`` matches; ``key`` tells it apart from the other ``_Dropping`` filters."""

    def __init__(self, key: str, drop: Callable[[logging.LogRecord], bool]) -> None:
        super().__init__()
        self.key, self.drop = key, drop

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.drop(record)


def _drop_records(loggers: tuple[str, ...], key: str, drop: Callable[[logging.LogRecord], bool]) -> None:
    """Add to each of ``loggers`` a filter that drops the records ``drop`` matches, once per process and ``key``."""
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, _Dropping) and existing.key == key for existing in logger.filters):
            logger.addFilter(_Dropping(key, drop))
