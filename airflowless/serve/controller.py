"""The serve controller's core: events in, actions out, no I/O.

It keeps, per deployment, the wanted replica count and the replicas it
knows (STARTING, RUNNING, STOPPING), and after each event answers what to do
so that the RUNNING + STARTING count meets the target: start replicas,
replace failed ones, drain and stop surplus ones, publish the RUNNING set to
the routers, and autoscale on :class:`Tick`. The driver
(:mod:`.driver`) turns actions into Dask calls and feeds results back.

Rolling updates: a :class:`DeploymentUpdated` with another ``version`` (new
code or arguments: a new model) replaces the replicas one at a time: at most
``max_surge`` new ones start; each that passes its start (health) check takes
the place of an old one, which leaves the routed set and drains (finishes its
requests) before it stops; old and new serve side by side meanwhile, so no
request fails. A new version whose replicas fail to start
:data:`MAX_START_FAILURES` times is rolled back: the deployment returns to the
version it was rolling from (its replicas never stopped serving) and says why.

Start failures: before a deployment has ever had a replica running, the
third failed start marks it DEPLOY_FAILED (its code or its resources are
wrong, and ``serve.run`` says so). Once it has run, a replica that cannot be
started (no worker has the resources free while one restarts, a worker lost
mid-start) is tried again after a backoff (:data:`BACKOFF_S` doubling up to
:data:`MAX_BACKOFF_S`, timed by :class:`Tick`), for as long as it takes; while
no replica runs, the published set says why, and routers fail requests fast
with that reason.

>>> core = Controller()
>>> key = ("app", "Model")
>>> core.handle(DeploymentUpdated(key, DeploymentConfig(num_replicas=1)))
[StartReplica(key=('app', 'Model'), replica_id='app/Model#1', version=0)]
>>> core.handle(ReplicaStarted("app/Model#1", info=None))
[PublishReplicas(key=('app', 'Model'), replica_ids=('app/Model#1',), unavailable='')]
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .autoscaling import Pending, decide
from .config import DeploymentConfig

__all__ = [
    "Controller", "ReplicaState", "DeploymentStatus",
    "DeploymentUpdated", "DeploymentDeleted", "ReplicaStarted", "ReplicaFailed", "ReplicaStopped",
    "ReplicaMetrics", "Tick", "StartReplica", "StopReplica", "PublishReplicas", "Event", "Action",
]

Key = tuple[str, str]  # (application, deployment)
MAX_START_FAILURES = 3
BACKOFF_S = 0.5
MAX_BACKOFF_S = 5.0


class ReplicaState(enum.Enum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"


class DeploymentStatus(enum.Enum):
    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeploymentUpdated:
    key: Key
    config: DeploymentConfig
    version: int = 0  # its code and arguments: another version rolls the replicas to it


@dataclass(frozen=True)
class DeploymentDeleted:
    key: Key


@dataclass(frozen=True)
class ReplicaStarted:
    replica_id: str
    info: Any


@dataclass(frozen=True)
class ReplicaFailed:
    replica_id: str
    reason: str
    while_starting: bool = False


@dataclass(frozen=True)
class ReplicaStopped:
    replica_id: str


@dataclass(frozen=True)
class ReplicaMetrics:
    replica_id: str
    ongoing: int


@dataclass(frozen=True)
class Tick:
    now: float
    queued: dict[Key, int] = field(default_factory=dict)


Event = DeploymentUpdated | DeploymentDeleted | ReplicaStarted | ReplicaFailed | ReplicaStopped | ReplicaMetrics | Tick


# -- actions -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StartReplica:
    key: Key
    replica_id: str
    version: int = 0


@dataclass(frozen=True)
class StopReplica:
    key: Key
    replica_id: str
    drain: bool = True


@dataclass(frozen=True)
class PublishReplicas:
    """Route to exactly these replicas; ``unavailable`` says why there are none (else empty)."""

    key: Key
    replica_ids: tuple[str, ...]
    unavailable: str = ""


Action = StartReplica | StopReplica | PublishReplicas


@dataclass
class _Replica:
    replica_id: str
    key: Key
    state: ReplicaState = ReplicaState.STARTING
    info: Any = None
    ongoing: int = 0
    version: int = 0


@dataclass
class _Deployment:
    key: Key
    config: DeploymentConfig
    target: int
    start_failures: int = 0
    message: str = ""
    failed: bool = False
    started_once: bool = False
    retry_at: float | None = None
    pending: Pending | None = None
    published: tuple[tuple[str, ...], str] = ((), "")
    version: int = 0
    rolling_from: int | None = None  # the version a roll started from (and goes back to if it fails)
    roll_failures: int = 0
    rolled_back: str = ""  # why the last roll was given up


class Controller:
    """Desired versus actual replicas of every deployment (see the module docstring)."""

    def __init__(self) -> None:
        self.deployments: dict[Key, _Deployment] = {}
        self.replicas: dict[str, _Replica] = {}
        self._counter = 0
        self._now = 0.0

    # -- queries ---------------------------------------------------------------------------
    def replicas_of(self, key: Key, *states: ReplicaState) -> list[_Replica]:
        return [r for r in self.replicas.values() if r.key == key and (not states or r.state in states)]

    def status(self, key: Key) -> DeploymentStatus:
        dep = self.deployments[key]
        if dep.failed:
            return DeploymentStatus.DEPLOY_FAILED
        running = len(self.replicas_of(key, ReplicaState.RUNNING))
        if dep.rolling_from is not None:
            return DeploymentStatus.UPDATING
        if running == dep.target and not self.replicas_of(key, ReplicaState.STARTING):
            return DeploymentStatus.HEALTHY
        return DeploymentStatus.UNHEALTHY if dep.message and running < dep.target else DeploymentStatus.UPDATING

    def info(self, replica_id: str) -> Any:
        replica = self.replicas.get(replica_id)
        return replica.info if replica is not None else None

    # -- events ----------------------------------------------------------------------------
    def handle(self, event: Event) -> list[Action]:
        """Apply one event; return the actions that bring actual replicas toward the desired ones."""
        if isinstance(event, DeploymentUpdated):
            old = self.deployments.get(event.key)
            auto = event.config.autoscaling_config
            target = event.config.initial_replicas
            if old is not None and auto is not None:
                target = min(max(old.target, auto.min_replicas), auto.max_replicas)
            updated = self.deployments[event.key] = _Deployment(event.key, event.config, target,
                                                                version=event.version)
            if old is not None:  # a running deployment updated in place (scaled, or a new version): it has run
                updated.started_once, updated.published = old.started_once, old.published
                updated.rolling_from = old.rolling_from
                if event.version != old.version and old.rolling_from is None and self.replicas_of(
                        event.key, ReplicaState.RUNNING):
                    updated.rolling_from = old.version
                if updated.rolling_from == event.version:  # back to what it rolled from: no roll
                    updated.rolling_from = None
            return self._reconcile(event.key)
        if isinstance(event, DeploymentDeleted):
            dep = self.deployments.get(event.key)
            if dep is None:
                return []
            dep.target = 0
            actions = self._reconcile(event.key)
            del self.deployments[event.key]
            return actions
        if isinstance(event, Tick):
            return self._tick(event)
        replica = self.replicas.get(event.replica_id)
        if replica is None:
            return []
        if isinstance(event, ReplicaMetrics):
            replica.ongoing = event.ongoing
            return []
        dep = self.deployments.get(replica.key)
        if isinstance(event, ReplicaStarted):
            if replica.state is not ReplicaState.STARTING:
                return []
            replica.state, replica.info = ReplicaState.RUNNING, event.info
            if dep is not None:
                dep.start_failures, dep.message, dep.started_once, dep.retry_at = 0, "", True, None
            return self._reconcile(replica.key)
        if isinstance(event, ReplicaStopped):
            del self.replicas[event.replica_id]
            return self._reconcile(replica.key) if dep is not None else []
        # ReplicaFailed
        was_running = replica.state is ReplicaState.RUNNING
        del self.replicas[event.replica_id]
        if dep is None:
            return []
        dep.message = f"replica {event.replica_id} failed: {event.reason}"
        if event.while_starting and dep.rolling_from is not None and replica.version == dep.version:
            dep.roll_failures += 1
            if dep.roll_failures >= MAX_START_FAILURES:  # the new version does not start: back to the old one
                dep.rolled_back = (f"version {dep.version} rolled back to {dep.rolling_from}: {dep.message}")
                dep.version, dep.rolling_from, dep.roll_failures = dep.rolling_from, None, 0
                dep.message, dep.retry_at = "", None
            else:
                dep.retry_at = self._now + min(BACKOFF_S * 2 ** (dep.roll_failures - 1), MAX_BACKOFF_S)
        elif event.while_starting:
            dep.start_failures += 1
            if dep.started_once:
                dep.retry_at = self._now + min(BACKOFF_S * 2 ** (dep.start_failures - 1), MAX_BACKOFF_S)
            elif dep.start_failures >= MAX_START_FAILURES:
                dep.failed = True
        stop: list[Action] = [StopReplica(replica.key, event.replica_id, drain=False)]
        return stop + self._reconcile(replica.key, force_publish=was_running)

    def _tick(self, event: Tick) -> list[Action]:
        self._now = event.now
        actions: list[Action] = []
        for key, dep in self.deployments.items():
            if dep.retry_at is not None and dep.retry_at <= self._now:
                actions += self._reconcile(key)
            auto = dep.config.autoscaling_config
            if auto is None or dep.failed:
                continue
            live = self.replicas_of(key, ReplicaState.RUNNING)
            ongoing = sum(r.ongoing for r in live) + event.queued.get(key, 0)
            decision = decide(auto, current=dep.target, ongoing=ongoing, now=event.now, pending=dep.pending)
            dep.pending = decision.pending
            if decision.desired != dep.target:
                dep.target = decision.desired
                actions += self._reconcile(key)
        return actions

    def _reconcile(self, key: Key, *, force_publish: bool = False) -> list[Action]:
        dep = self.deployments.get(key)
        if dep is None:
            return []
        actions: list[Action] = []
        starting = self.replicas_of(key, ReplicaState.STARTING)
        running = self.replicas_of(key, ReplicaState.RUNNING)
        surplus = len(starting) + len(running) - dep.target
        if dep.retry_at is not None and dep.retry_at <= self._now:
            dep.retry_at = None  # the backoff is over
        if any(r.version != dep.version for r in starting + running):
            actions += self._roll(dep, starting, running)
        elif dep.rolling_from is not None and len(running) >= dep.target:  # all run the new version: done
            dep.rolling_from, dep.roll_failures = None, 0
        if any(r.version != dep.version for r in starting + running):
            pass  # rolling: _roll starts and stops
        elif surplus < 0 and not dep.failed and dep.retry_at is None:
            actions += self._start(dep, -surplus)
        elif surplus > 0:  # newest starting first, then the least busy running ones
            victims = sorted(starting, key=lambda r: r.replica_id, reverse=True)
            victims += sorted(running, key=lambda r: r.ongoing)
            for replica in victims[:surplus]:
                replica.state = ReplicaState.STOPPING
                actions.append(StopReplica(key, replica.replica_id, drain=True))
        published = tuple(r.replica_id for r in self.replicas_of(key, ReplicaState.RUNNING))
        unavailable = ""
        if not published and dep.started_once and dep.start_failures:
            unavailable = f"its replicas cannot be started for now, tried again with backoff ({dep.message})"
        if (published, unavailable) != dep.published or force_publish:
            dep.published = (published, unavailable)
            actions.insert(0, PublishReplicas(key, published, unavailable))
        return actions

    def _start(self, dep: _Deployment, count: int) -> list[Action]:
        actions: list[Action] = []
        for _ in range(count):
            self._counter += 1
            replica_id = f"{dep.key[0]}/{dep.key[1]}#{self._counter}"
            self.replicas[replica_id] = _Replica(replica_id, dep.key, version=dep.version)
            actions.append(StartReplica(dep.key, replica_id, dep.version))
        return actions

    def _roll(self, dep: _Deployment, starting: list[_Replica], running: list[_Replica]) -> list[Action]:
        """One step of replacing replicas of other versions by ``dep.version``'s: each new one running retires
        an old one (drained); at most ``max_surge`` new ones start at a time."""
        actions: list[Action] = []
        for replica in starting:
            if replica.version != dep.version:  # an old version's replica that never served: stop it now
                replica.state = ReplicaState.STOPPING
                actions.append(StopReplica(dep.key, replica.replica_id, drain=False))
        fresh_running = [r for r in running if r.version == dep.version]
        fresh_starting = [r for r in starting if r.version == dep.version]
        old = sorted((r for r in running if r.version != dep.version), key=lambda r: r.ongoing)
        retire = max(0, len(old) + len(fresh_running) - dep.target)
        for replica in old[:retire]:
            replica.state = ReplicaState.STOPPING
            actions.append(StopReplica(dep.key, replica.replica_id, drain=True))
        room = min(dep.config.max_surge - len(fresh_starting), dep.target - len(fresh_running) - len(fresh_starting))
        if room > 0 and not dep.failed and dep.retry_at is None:
            actions += self._start(dep, room)
        return actions

