"""Adaptive scaling driven by what airflowless waits for.

Dask's :class:`~distributed.deploy.Adaptive` asks the scheduler for a target
worker count from task durations. It cannot see what airflowless waits for:
a Trainer's ranks need ``num_workers`` *distinct* workers with ``CPU=1`` each
before a single task is submitted, and trials or replicas queue behind
resource restrictions a busy worker already "has". Three pieces close the gap:

- :class:`DemandPlugin`, a scheduler plugin, keeps the demand airflowless
  declares (``{resources, count, distinct}`` per waiting group) and answers
  ``airflowless_adaptive_target``: the workers needed for that demand and for
  the tasks whose resource restrictions no worker can meet now;
- :class:`AirflowlessAdaptive` (an ``Adaptive``) takes the larger of Dask's
  target and that one, and tells the plugin it may grow up to ``maximum``;
- :class:`WaitingFor`, used by whoever waits (the worker group placing
  ranks), declares the demand while it waits and withdraws it after.

Scaling down is Dask's own: idle workers go after ``wait_count`` intervals.

>>> workers_to_add([{"CPU": 1.0}], [Demand({"CPU": 1.0}, 3)], shape={"CPU": 1.0})
2
>>> cluster.adapt(Adaptive=AirflowlessAdaptive, minimum=1, maximum=4)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distributed.deploy.adaptive import Adaptive
from distributed.diagnostics.plugin import SchedulerPlugin

__all__ = ["AirflowlessAdaptive", "Demand", "DemandPlugin", "SchedulerTargetPlugin", "WaitingFor", "adapt", "backlog",
           "has_demand_plugin", "may_grow", "workers_to_add"]

PLUGIN_NAME = "airflowless-demand"
_ADAPTIVE_FRESH_S = 10.0  # an adaptive loop not heard from for this long no longer counts


@dataclass(frozen=True)
class Demand:
    """``count`` units of ``resources`` that wait; ``distinct``: one unit per worker (ranks)."""

    resources: dict[str, float]
    count: int = 1
    distinct: bool = False


def _fits(offer: dict[str, float], need: dict[str, float]) -> bool:
    return all(offer.get(name, 0.0) >= amount - 1e-9 for name, amount in need.items())


def _take(offer: dict[str, float], need: dict[str, float]) -> None:
    for name, amount in need.items():
        offer[name] = offer.get(name, 0.0) - amount


def workers_to_add(free: Sequence[dict[str, float]], demands: Sequence[Demand],
                   shape: dict[str, float]) -> int:
    """How many new workers shaped like ``shape`` the ``demands`` need beyond the ``free`` offers.

    Units go first to existing workers, then to new ones (packed, unless a
    demand is ``distinct``). A unit that a new worker could not host either is
    not counted: growing would not help it.

    >>> workers_to_add([{"CPU": 0.0}], [Demand({"CPU": 1.0}, 2, distinct=True)], {"CPU": 2.0})
    2
    >>> workers_to_add([], [Demand({"GPU": 1.0}, 1)], {"CPU": 1.0})
    0
    """
    offers = [dict(offer) for offer in free]
    existing = len(offers)
    for demand in demands:
        if not _fits(shape, demand.resources) and not any(_fits(o, demand.resources) for o in offers):
            continue
        used: set[int] = set()
        for _ in range(demand.count):
            index = next((i for i, offer in enumerate(offers)
                          if not (demand.distinct and i in used) and _fits(offer, demand.resources)), None)
            if index is None:
                if not _fits(shape, demand.resources):
                    break
                offers.append(dict(shape))
                index = len(offers) - 1
            _take(offers[index], demand.resources)
            used.add(index)
    return len(offers) - existing


def backlog(workers: Sequence[tuple[dict[str, float], Sequence[dict[str, float]]]],
            unrunnable: Sequence[dict[str, float]]) -> tuple[list[dict[str, float]], list[Demand]]:
    """Free resources per worker, and the tasks that wait for resources, from the scheduler's view.

    ``workers``: per worker, its total resources and the restrictions of the
    tasks it processes (in order). A worker runs those that fit; the rest wait
    on it, as do the ``unrunnable`` tasks no worker can take.

    >>> backlog([({"CPU": 1.0}, [{"CPU": 1.0}, {"CPU": 1.0}])], [])
    ([{'CPU': 0.0}], [Demand(resources={'CPU': 1.0}, count=1, distinct=False)])
    """
    free: list[dict[str, float]] = []
    waiting = [Demand(dict(need)) for need in unrunnable]
    for total, processing in workers:
        offer = dict(total)
        for need in processing:
            if _fits(offer, need):
                _take(offer, need)
            else:
                waiting.append(Demand(dict(need)))
        free.append(offer)
    return free, waiting


class DemandPlugin(SchedulerPlugin):
    """The scheduler's record of what airflowless waits for; answers adaptive scaling.

    Lifecycle: ``start`` adds the ``airflowless_*`` handlers to the scheduler;
    clients put and drop demand by key; the adaptive loop asks for a target;
    when Dask picks workers to retire, those hosting actors (serve replicas)
    are kept.
    Install it with ``client.register_plugin(DemandPlugin())``, or with
    ``dask scheduler --preload airflowless.runtime.adaptive``.
    """

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.demands: dict[str, Demand] = {}
        self.maximum: float = 0.0
        self.heard = float("-inf")
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        from .._dask_internals import add_scheduler_handlers

        self.scheduler = scheduler
        add_scheduler_handlers(scheduler, {
            "airflowless_demand_put": self.put, "airflowless_demand_drop": self.drop,
            "airflowless_adaptive_target": self.target, "airflowless_may_grow": self.may_grow})

    def valid_workers_downscaling(self, scheduler: Any, workers: list[Any]) -> list[Any]:
        """Never retire a worker hosting an actor (a serve replica): its state would die with it."""
        from .._dask_internals import without_actors

        return without_actors(workers)

    def put(self, key: str, resources: dict[str, float], count: int, distinct: bool) -> None:
        self.demands[key] = Demand({k: float(v) for k, v in resources.items()}, int(count), bool(distinct))

    def drop(self, key: str) -> None:
        self.demands.pop(key, None)

    def may_grow(self) -> bool:
        """Whether an adaptive loop runs and may still add workers (or a worker that just joined has
        yet to declare its resources)."""
        from .._dask_internals import resource_view

        if time.monotonic() - self.heard >= _ADAPTIVE_FRESH_S:
            return False
        totals, _, _ = resource_view(self.scheduler)
        return self.maximum > len(totals) or not all(totals)

    def target(self, shape: dict[str, float] | None = None, maximum: float | None = None) -> int:
        """Workers wanted for the declared demand and the resource backlog; 0 when nothing waits."""
        from .._dask_internals import resource_view

        if maximum is not None:
            self.maximum, self.heard = float(maximum), time.monotonic()
        totals, processing, unrunnable = resource_view(self.scheduler)
        free, waiting = backlog(list(zip(totals, processing, strict=True)), unrunnable)
        demands = [*waiting, *self.demands.values()]
        if not demands:
            return 0
        shape = shape or _typical(totals) or {"CPU": 1.0}
        return len(totals) + workers_to_add(free, demands, shape)


def _typical(totals: Sequence[dict[str, float]]) -> dict[str, float] | None:
    """The resources most workers declare (a new worker is assumed to look like them)."""
    if not totals:
        return None
    shapes = Counter(tuple(sorted(t.items())) for t in totals)
    return dict(shapes.most_common(1)[0][0])


class AirflowlessAdaptive(Adaptive):
    """Dask's adaptive scaling, also counting the workers airflowless waits for.

    ``shape`` is what a new worker declares (default: read from the cluster's
    worker spec, else like the current workers). Without the
    :class:`DemandPlugin` on the scheduler it installs one.

    >>> cluster.adapt(Adaptive=AirflowlessAdaptive, minimum=0, maximum=8)  # doctest: +SKIP
    """

    def __init__(self, cluster: Any, *args: Any, shape: dict[str, float] | None = None, **kwargs: Any) -> None:
        super().__init__(cluster, *args, **kwargs)
        if shape is None:
            from .resources import spec_resources

            spec = getattr(cluster, "new_spec", None)
            shape = spec_resources(spec) if isinstance(spec, dict) else None
        self.shape = shape
        self.installed = False  # the DemandPlugin on the scheduler (added on the first target)

    async def announce(self) -> int:
        """Install the :class:`DemandPlugin` if the scheduler has none, tell it the ``maximum``; its target."""
        if not self.installed:  # the plugin is idempotent: one already there (init, a preload) stays
            from distributed.protocol.pickle import dumps

            await self.scheduler.register_scheduler_plugin(plugin=dumps(DemandPlugin()), name=PLUGIN_NAME,
                                                           idempotent=True)
            self.installed = True
        return int(await self.scheduler.airflowless_adaptive_target(shape=self.shape, maximum=self.maximum))

    async def target(self) -> int:
        base = int(await super().target())
        return max(base, await self.announce())


def adapt(cluster: Any, minimum: int = 0, maximum: int | float = float("inf"), **kwargs: Any) -> Any:
    """Make ``cluster`` adaptive between ``minimum`` and ``maximum`` workers, airflowless-aware.

    >>> adapt(LocalCluster(n_workers=1), minimum=1, maximum=4)  # doctest: +SKIP
    """
    from ..errors import ConfigError

    if minimum < 0 or maximum < minimum:
        raise ConfigError(f"adaptive scaling needs 0 <= minimum <= maximum, got minimum={minimum}, "
                          f"maximum={maximum}; pass e.g. minimum=1, maximum=4")
    adaptive = cluster.adapt(Adaptive=AirflowlessAdaptive, minimum=minimum, maximum=maximum, **kwargs)
    if not getattr(cluster, "asynchronous", False):  # so a fit right after this already may wait to grow
        cluster.sync(adaptive.announce)
    return adaptive


def _plugin_installed(dask_scheduler: Any) -> bool:
    return PLUGIN_NAME in dask_scheduler.plugins


def has_demand_plugin(client: Any) -> bool:
    """Whether the scheduler behind ``client`` has the :class:`DemandPlugin` (asked without an
    RPC the scheduler would log as unknown)."""
    try:
        return bool(client.run_on_scheduler(_plugin_installed))
    except Exception:
        return False


def may_grow(client: Any) -> bool:
    """Whether the cluster behind ``client`` scales adaptively and may still add workers."""
    if not has_demand_plugin(client):
        return False
    return bool(client.sync(client.scheduler.airflowless_may_grow))


class WaitingFor:
    """Declares, while its holder waits, that ``count`` units of ``resources`` are wanted.

    >>> with WaitingFor(client, "train-abc", {"CPU": 1.0}, 2, distinct=True) as waiting:  # doctest: +SKIP
    ...     waiting.declare()          # each time placement fails; cheap after the first
    """

    def __init__(self, client: Any, key: str, resources: dict[str, float], count: int, *,
                 distinct: bool = False) -> None:
        self.client, self.key = client, key
        self.demand = {"resources": dict(resources), "count": int(count), "distinct": distinct}
        self.declared = False
        self.listened: bool | None = None  # whether the scheduler has a DemandPlugin (asked once)

    def declare(self) -> None:
        if self.declared:
            return
        if self.listened is None:
            self.listened = has_demand_plugin(self.client)
        if self.listened:
            self.client.sync(self.client.scheduler.airflowless_demand_put, key=self.key, **self.demand)
            self.declared = True

    def withdraw(self) -> None:
        if self.declared:
            self.declared = False
            with contextlib.suppress(Exception):  # the scheduler is gone: so is the demand
                self.client.sync(self.client.scheduler.airflowless_demand_drop, key=self.key)

    def __enter__(self) -> WaitingFor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.withdraw()


class SchedulerTargetPlugin(DemandPlugin):
    """A :class:`DemandPlugin` that also raises the scheduler's own ``adaptive_target``.

    For autoscalers that ask the scheduler rather than run an
    :class:`AirflowlessAdaptive` (the dask-kubernetes operator's
    ``DaskAutoscaler`` asks ``/api/v1/adaptive_target``). They do not say their
    maximum: it is Dask's ``distributed.adaptive.maximum`` setting (e.g.
    ``DASK_DISTRIBUTED__ADAPTIVE__MAXIMUM=8`` on the scheduler), used so that a
    Trainer waits for workers rather than failing while the cluster may grow.
    """

    async def start(self, scheduler: Any) -> None:
        import dask.config

        from .._dask_internals import extend_adaptive_target

        await super().start(scheduler)
        maximum = float(dask.config.get("distributed.adaptive.maximum"))
        extend_adaptive_target(scheduler, lambda dask_target: max(dask_target, self.target(maximum=maximum)))


def dask_setup(scheduler: Any) -> None:
    """``dask scheduler --preload airflowless.runtime.adaptive``: the :class:`SchedulerTargetPlugin`.

    Its ``adaptive_target`` then includes what airflowless waits for, for
    any autoscaler that asks the scheduler.
    """
    scheduler.add_plugin(SchedulerTargetPlugin())
