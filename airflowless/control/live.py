"""Live feeds: what a driver's Data executor and serve controller publish to the scheduler while they work.

Publishers (in the driver) call :func:`publish` at most once per
:data:`INTERVAL_S` per execution or serve runtime (:class:`Throttle`), with one
message on a topic of the scheduler's event broker:

- ``airflowless-data``: one streaming execution — ``execution`` (its id),
  ``dataset``, ``operators`` (per operator: tasks submitted/done, blocks, rows,
  bytes out), ``in_flight_bytes`` against ``budget_bytes``, ``waiting`` (why the
  consumer waits: ``upstream`` tasks not done, the memory ``budget``, or the task
  window's ``backpressure``; empty when it does not), ``finished``.
- ``airflowless-serve``: one serve runtime — ``runtime`` (its id) and
  ``deployments``: per deployment its status, target and autoscaling bounds,
  queue length, requests/s, p50/p99 latency (ms) over the last interval, and its
  replicas (id, state, worker, ongoing requests).

On the scheduler, :func:`install` adds a plugin that keeps the latest message
of each execution/runtime (and drops the topic's backlog, so a long-running
driver costs the scheduler a constant amount of memory); :func:`latest_data`
and :func:`latest_serve` answer the pages' ``/live/data`` and ``/live/serve``.

>>> feeds = LiveFeeds()
>>> feeds.log_event(DATA_TOPIC, {"execution": "e1", "dataset": "read_parquet", "operators": [], "time": 1.0})
>>> [e["execution"] for e in feeds.data_view()["executions"]]
['e1']
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

__all__ = ["DATA_TOPIC", "SERVE_TOPIC", "INTERVAL_S", "LATENCY_BUCKETS", "Throttle", "LiveFeeds", "publish",
           "install", "latest_data", "latest_serve", "percentiles", "latency_summary"]

DATA_TOPIC = "airflowless-data"
SERVE_TOPIC = "airflowless-serve"
INTERVAL_S = 1.0
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # seconds
_KEEP_EXECUTIONS = 20  # finished executions shown after they end
_SERVE_STALE_S = 30.0  # a serve runtime silent this long has gone (its driver ended)
_PLUGIN = "airflowless-live"


class Throttle:
    """``due()`` is true at most once per ``interval`` seconds, the first time one interval after it was made
    (work that ends sooner publishes nothing); ``fired`` says whether it ever was."""

    def __init__(self, interval: float = INTERVAL_S) -> None:
        self.interval = interval
        self._next = time.monotonic() + interval
        self.fired = False

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        self.fired = True
        return True


def publish(client: Any, topic: str, message: dict[str, Any]) -> Any:
    """Send ``message`` to the scheduler's ``topic`` without waiting for the answer.

    A synchronous client sends it from its own event loop (the caller goes on at
    once); an asynchronous one gets a coroutine to schedule. Never raises: a feed
    is best effort, the work it describes goes on.
    """
    message = {**message, "time": time.time()}
    try:
        if getattr(client, "asynchronous", False):
            return _quietly(client.log_event(topic, message))
        client.loop.add_callback(_send, client, topic, message)
    except Exception:
        pass
    return None


async def _send(client: Any, topic: str, message: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):
        await client.scheduler.log_event(topic=topic, msg=message)


async def _quietly(sent: Any) -> None:
    with contextlib.suppress(Exception):
        if inspect.isawaitable(sent):
            await sent


def percentiles(samples: list[float], *qs: float) -> list[float | None]:
    """The ``qs`` quantiles (0..1) of ``samples`` (nearest rank), None each when there are none.

    >>> percentiles([3.0, 1.0, 2.0, 4.0], 0.5, 0.99)
    [2.0, 4.0]
    """
    if not samples:
        return [None for _ in qs]
    ordered = sorted(samples)
    return [ordered[max(1, math.ceil(q * len(ordered))) - 1] for q in qs]


def latency_summary(latencies: list[float]) -> dict[str, Any]:
    """What a deployment's message says of its latencies (s) over one interval: p50/p99 in ms, and
    the samples as histogram counts (``le`` :data:`LATENCY_BUCKETS`, cumulative) and sum.

    >>> latency_summary([0.002, 0.004])["latency_counts"][:3]
    [0, 1, 2]
    """
    p50, p99 = percentiles(latencies, 0.5, 0.99)
    return {"p50_ms": None if p50 is None else 1000 * p50, "p99_ms": None if p99 is None else 1000 * p99,
            "latency_counts": [sum(1 for v in latencies if v <= bound) for bound in LATENCY_BUCKETS],
            "latency_samples": len(latencies), "latency_sum": sum(latencies)}


class LiveFeeds(SchedulerPlugin):  # type: ignore[misc]
    """A scheduler plugin keeping the latest message of each execution and serve runtime."""

    name = _PLUGIN

    def __init__(self) -> None:
        self.scheduler: Any = None
        self.executions: dict[str, dict[str, Any]] = {}
        self.runtimes: dict[str, dict[str, Any]] = {}
        self.serve_totals: dict[tuple[str, str], dict[str, Any]] = {}  # since this plugin started

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def log_event(self, topic: str, msg: Any) -> None:
        if topic not in (DATA_TOPIC, SERVE_TOPIC) or not isinstance(msg, dict):
            return
        if topic == DATA_TOPIC and "execution" in msg:
            old = self.executions.get(str(msg["execution"]))
            if old is not None and (old.get("finished") or old.get("time", 0) > msg.get("time", 0)):
                return  # sent earlier, arrived later (messages are not waited for): the newer one stands
            self.executions.pop(str(msg["execution"]), None)  # re-inserted last: newest at the end
            self.executions[str(msg["execution"])] = msg
            finished = [k for k, v in self.executions.items() if v.get("finished")]
            for key in finished[:max(0, len(finished) - _KEEP_EXECUTIONS)]:
                del self.executions[key]
        elif topic == SERVE_TOPIC and "runtime" in msg:
            old = self.runtimes.get(str(msg["runtime"]))
            if old is None or old.get("time", 0) <= msg.get("time", 0):
                self.runtimes[str(msg["runtime"])] = msg
            for deployment in msg.get("deployments", []):
                self._add_totals(deployment)
        if self.scheduler is not None:
            from .._dask_internals import trim_topic

            trim_topic(self.scheduler, topic)

    def _add_totals(self, deployment: dict[str, Any]) -> None:
        counts = deployment.get("latency_counts") or [0] * len(LATENCY_BUCKETS)
        key = (str(deployment.get("app")), str(deployment.get("deployment")))
        totals = self.serve_totals.setdefault(key, {"requests": 0, "samples": 0, "sum": 0.0,
                                                    "buckets": [0] * len(LATENCY_BUCKETS)})
        totals["requests"] += int(deployment.get("requests") or 0)
        totals["samples"] += int(deployment.get("latency_samples") or 0)
        totals["sum"] += float(deployment.get("latency_sum") or 0.0)
        totals["buckets"] = [a + int(b) for a, b in zip(totals["buckets"], counts, strict=False)]

    def data_view(self) -> dict[str, Any]:
        executions = sorted(self.executions.values(), key=lambda m: (bool(m.get("finished")), -m.get("time", 0)))
        return {"available": True, "executions": executions,
                "message": "" if executions else "no dataset has streamed on this cluster since it started"}

    def serve_view(self) -> dict[str, Any]:
        now = time.time()
        for key in [k for k, m in self.runtimes.items() if now - m.get("time", now) > _SERVE_STALE_S]:
            del self.runtimes[key]
        deployments = [d for m in self.runtimes.values() for d in m.get("deployments", [])]
        return {"available": True, "deployments": deployments,
                "message": "" if deployments else "no serve application runs on this cluster"}


def install(scheduler: Any) -> LiveFeeds:
    """Add the :class:`LiveFeeds` plugin to ``scheduler`` (once), primed with what its topics hold."""
    plugin = scheduler.plugins.get(_PLUGIN)
    if isinstance(plugin, LiveFeeds):
        return plugin
    plugin = LiveFeeds()
    plugin.scheduler = scheduler
    for topic in (DATA_TOPIC, SERVE_TOPIC):
        for _, msg in scheduler.get_events(topic):
            plugin.log_event(topic, msg)
    scheduler.add_plugin(plugin, name=_PLUGIN)
    return plugin


def latest_data(scheduler: Any) -> dict[str, Any]:
    """The latest state of each dataset execution streaming (or lately streamed) on this cluster."""
    return install(scheduler).data_view()


def latest_serve(scheduler: Any) -> dict[str, Any]:
    """The latest state of each deployment served by a live driver of this cluster."""
    return install(scheduler).serve_view()
