"""The ``airflowless_*`` Prometheus metrics on the scheduler's ``/metrics``.

distributed's ``/metrics`` serves prometheus_client's default registry;
:func:`register` adds one collector there (once per process). Each scrape reads:

- from the record (the latest :data:`STAGE_WINDOW` stage runs; read in a thread at
  most every :data:`CACHE_S` seconds, so scrapes cost the database and the
  scheduler's event loop little):
  ``airflowless_stage_runs_total{pipeline,stage,outcome}`` and the histogram
  ``airflowless_stage_duration_seconds{pipeline,stage,outcome}``;
  ``airflowless_trials{experiment,state}`` for the latest experiments;
- from the record, the service's ``airflowless_queued_runs``, ``airflowless_service_runs{trigger,status}``
  and the histogram ``airflowless_schedule_lag_seconds`` (due time to first stage);
- from the live data feed (:mod:`.live`): ``airflowless_dataset_rows`` and
  ``airflowless_dataset_bytes{dataset,operator}`` of the latest executions,
  ``airflowless_dataset_in_flight_bytes`` and ``airflowless_dataset_budget_bytes``;
- from the live serve feed: ``airflowless_serve_requests_total{app,deployment}``,
  the histogram ``airflowless_serve_request_duration_seconds{app,deployment}``,
  ``airflowless_serve_replicas{app,deployment}`` and ``airflowless_serve_queued``.

A store that cannot be read leaves its metrics out of the scrape; the rest is served.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from .context import ControlContext

__all__ = ["register", "AirflowlessCollector", "STAGE_BUCKETS", "STAGE_WINDOW", "CACHE_S"]

STAGE_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0)
STAGE_WINDOW = 10_000
CACHE_S = 5.0
_lock = threading.Lock()
logger = logging.getLogger(__name__)
_registered: AirflowlessCollector | None = None


def register(ctx: ControlContext) -> AirflowlessCollector | None:
    """Add the collector for ``ctx`` to prometheus_client's default registry; again: it follows the new ``ctx``.

    None without prometheus_client (then distributed serves no ``/metrics`` either). On a scheduler, it
    also installs the live feeds' plugin (:func:`.live.install`).
    """
    global _registered
    if ctx.scheduler is not None:  # the live feeds are kept (and their topics trimmed) from now on
        from .live import install

        install(ctx.scheduler)
    with _lock:
        if _registered is None:
            try:
                from prometheus_client import REGISTRY
            except ImportError:
                logger.warning("prometheus_client is not installed: no airflowless_* metrics on /metrics; "
                               "pip install prometheus-client")
                return None

            _registered = AirflowlessCollector(ctx)
            REGISTRY.register(_registered)
        else:
            _registered.ctx = ctx
        return _registered


class AirflowlessCollector:
    """A prometheus_client collector reading the record and the live feeds of one control context."""

    def __init__(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self._cache: tuple[float, str | None, list[Any]] = (0.0, None, [])
        self._refreshing: threading.Event | None = None

    def describe(self) -> list[Any]:
        return []  # no scrape at registration: the store may be slow or absent

    def collect(self) -> Iterator[Any]:
        yield from self._from_record()
        scheduler = self.ctx.scheduler
        if scheduler is not None:
            from .live import install

            feeds = install(scheduler)
            yield from _data_metrics(feeds.data_view())
            yield from _serve_metrics(feeds)

    def _from_record(self) -> list[Any]:
        """The record's metrics as last read; a stale read is renewed in a thread, so a scrape never
        waits on the database on the scheduler's event loop (the first of a store waits up to 1 s)."""
        url = self.ctx.current_store_url()
        if url is None:
            return []
        at, cached_url, families = self._cache
        if cached_url != url or time.monotonic() - at >= CACHE_S:
            done = self._refresh(url)
            if cached_url != url:
                done.wait(1.0)
        at, cached_url, families = self._cache
        return families if cached_url == url else []

    def _refresh(self, url: str) -> threading.Event:
        with _lock:
            if self._refreshing is None:
                self._refreshing = threading.Event()
                threading.Thread(target=self._read, args=(url, self._refreshing), daemon=True,
                                 name="airflowless-metrics").start()
            return self._refreshing

    def _read(self, url: str, done: threading.Event) -> None:
        families: list[Any] = []
        try:
            with contextlib.suppress(Exception):  # no store, or unreachable: those metrics are left out
                store = self.ctx.store()
                families = [*_stage_metrics(store), _trial_metrics(store), *_service_metrics(store)]
            self._cache = (time.monotonic(), url, families)
        finally:
            with _lock:
                self._refreshing = None
            done.set()


def _stage_metrics(store: Any) -> list[Any]:
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
    from sqlalchemy import desc, select

    from ..store import schema

    stages, runs = schema.stage_runs, schema.pipeline_runs
    query = (select(runs.c.pipeline, stages.c.stage, stages.c.status, stages.c.duration_s)
             .join(runs, runs.c.id == stages.c.run_id).order_by(desc(stages.c.run_id)).limit(STAGE_WINDOW))
    with store.engine.begin() as conn:
        rows = conn.execute(query).all()
    counts: dict[tuple[str, str, str], int] = {}
    timed: dict[tuple[str, str, str], list[float]] = {}
    for pipeline, stage, status, duration in rows:
        key = (str(pipeline), str(stage), str(status))
        counts[key] = counts.get(key, 0) + 1
        if duration is not None:
            timed.setdefault(key, []).append(float(duration))
    labels = ["pipeline", "stage", "outcome"]
    total = CounterMetricFamily("airflowless_stage_runs", "Stage runs in the record, by outcome "
                                f"(the latest {STAGE_WINDOW})", labels=labels)
    for key, count in sorted(counts.items()):
        total.add_metric(list(key), count)
    durations = HistogramMetricFamily("airflowless_stage_duration_seconds",
                                      "How long stage runs took, by outcome", labels=labels)
    for key, values in sorted(timed.items()):
        durations.add_metric(list(key), _buckets(values, STAGE_BUCKETS), sum_value=sum(values))
    return [total, durations]


LAG_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
RUN_WINDOW = 1_000


def _service_metrics(store: Any) -> list[Any]:
    """The service's queue, its runs by trigger, and its schedule lag (due time to the first stage started)."""
    from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
    from sqlalchemy import desc, func, select

    from ..store import schema
    from ..store.records import RunStatus

    runs, stages = schema.pipeline_runs, schema.stage_runs
    with store.engine.begin() as conn:
        latest = conn.execute(select(runs.c.id, runs.c.trigger, runs.c.status, runs.c.interval_end)
                              .where(runs.c.trigger.is_not(None)).order_by(desc(runs.c.id)).limit(RUN_WINDOW)).all()
        scheduled = [row.id for row in latest if row.trigger == "schedule" and row.interval_end is not None]
        first_stage = dict(conn.execute(select(stages.c.run_id, func.min(stages.c.started_at))
                                        .where(stages.c.run_id.in_(scheduled)).group_by(stages.c.run_id)).all()
                           ) if scheduled else {}
    queued = GaugeMetricFamily("airflowless_queued_runs", "Runs waiting in the service's queue")
    queued.add_metric([], float(sum(row.status == RunStatus.QUEUED for row in latest)))
    by_trigger: dict[tuple[str, str], int] = {}
    for row in latest:
        by_trigger[(str(row.trigger), str(row.status))] = by_trigger.get((str(row.trigger), str(row.status)), 0) + 1
    counted = GaugeMetricFamily("airflowless_service_runs", f"The service's latest {RUN_WINDOW} runs, by what "
                                "started them and their state", labels=["trigger", "status"])
    for key, count in sorted(by_trigger.items()):
        counted.add_metric(list(key), float(count))
    from ..store.clock import aware

    lags = [(aware(first_stage[row.id]) - aware(row.interval_end)).total_seconds()  # type: ignore[operator]
            for row in latest if row.id in first_stage and first_stage[row.id] is not None]
    lag = HistogramMetricFamily("airflowless_schedule_lag_seconds", "From a scheduled run's due time to its first "
                                "stage starting")
    lag.add_metric([], _buckets(lags, LAG_BUCKETS), sum_value=sum(lags))
    return [queued, counted, lag]


def _buckets(values: list[float], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    cumulative = [(str(bound), float(sum(1 for v in values if v <= bound))) for bound in bounds]
    return [*cumulative, ("+Inf", float(len(values)))]


def _trial_metrics(store: Any) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    from ..store.records import ExperimentStatus

    gauge = GaugeMetricFamily("airflowless_trials", "Trials of the latest experiments, by state",
                              labels=["experiment", "state"])
    from . import reads

    for experiment in reads.experiments(store, limit=50)["experiments"]:
        for state, count in sorted(experiment["trials"].items()):
            gauge.add_metric([str(experiment["name"]), ExperimentStatus.shown(state)], count)
    return gauge


def _data_metrics(view: dict[str, Any]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    rows = GaugeMetricFamily("airflowless_dataset_rows", "Rows out of each operator of the latest "
                             "dataset executions", labels=["dataset", "execution", "operator"])
    size = GaugeMetricFamily("airflowless_dataset_bytes", "Bytes out of each operator of the latest "
                             "dataset executions", labels=["dataset", "execution", "operator"])
    held = GaugeMetricFamily("airflowless_dataset_in_flight_bytes", "Bytes of blocks held by a streaming "
                             "execution", labels=["dataset", "execution"])
    budget = GaugeMetricFamily("airflowless_dataset_budget_bytes", "The memory budget of a streaming "
                               "execution", labels=["dataset", "execution"])
    for execution in view["executions"]:
        names = [str(execution.get("dataset")), str(execution.get("execution"))]
        for op in execution.get("operators", []):
            rows.add_metric([*names, str(op["operator"])], float(op.get("rows") or 0))
            size.add_metric([*names, str(op["operator"])], float(op.get("bytes") or 0))
        held.add_metric(names, float(execution.get("in_flight_bytes") or 0))
        budget.add_metric(names, float(execution.get("budget_bytes") or 0))
    yield from (rows, size, held, budget)


def _serve_metrics(feeds: Any) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    from .live import LATENCY_BUCKETS

    labels = ["app", "deployment"]
    requests = CounterMetricFamily("airflowless_serve_requests", "Requests answered by a deployment",
                                   labels=labels)
    latency = HistogramMetricFamily("airflowless_serve_request_duration_seconds",
                                    "Request latency through a deployment's router", labels=labels)
    replicas = GaugeMetricFamily("airflowless_serve_replicas", "Running replicas of a deployment", labels=labels)
    target = GaugeMetricFamily("airflowless_serve_target_replicas", "Replicas a deployment should run",
                               labels=labels)
    queued = GaugeMetricFamily("airflowless_serve_queued", "Requests waiting for a replica", labels=labels)
    for (app, name), totals in sorted(feeds.serve_totals.items()):
        requests.add_metric([app, name], totals["requests"])
        latency.add_metric([app, name], [(str(b), float(c)) for b, c in zip(LATENCY_BUCKETS, totals["buckets"],
                                                                            strict=True)]
                           + [("+Inf", float(totals["samples"]))], sum_value=totals["sum"])
    for deployment in feeds.serve_view()["deployments"]:
        names = [str(deployment["app"]), str(deployment["deployment"])]
        running = sum(1 for r in deployment.get("replicas", []) if r.get("state") == "RUNNING")
        replicas.add_metric(names, running)
        target.add_metric(names, float(deployment.get("target_replicas") or 0))
        queued.add_metric(names, float(deployment.get("queued") or 0))
    yield from (requests, latency, replicas, target, queued)
