"""The thin side that talks to Dask: runs the controller core's actions, feeds back what happened.

Everything of serve in the driver runs on one event loop in one daemon thread
(:class:`ServeRuntime`): an asynchronous Dask client, the controller, the
routers and the uvicorn server of the HTTP proxy. Why the driver process and
a thread: a request takes one hop (proxy -> replica's socket) with no extra
process, the ingress lives exactly as long as ``serve.run`` ... ``serve.shutdown``,
and the proxy's loop is the routers' loop, so routing needs no locks.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from .._dask_internals import scheduler_identity
from .._library_internals import uvicorn_bound_port
from ..errors import ConfigError
from ..runtime.tls import client_context, with_client_role
from ..settings import get_settings
from .config import DeploymentConfig
from .controller import (
    Action,
    Controller,
    DeploymentDeleted,
    DeploymentStatus,
    DeploymentUpdated,
    Event,
    Key,
    PublishReplicas,
    ReplicaFailed,
    ReplicaMetrics,
    ReplicaStarted,
    ReplicaStopped,
    StartReplica,
    StopReplica,
    Tick,
)
from .deployment import Deployment
from .errors import DeploymentNotFoundError, ServeError
from .http_options import HTTPOptions
from .http_server import ingress_ssl_context, make_server, run_server
from .proxy import RouteTarget, build_app
from .records import record_models, served_models
from .replica import Replica, ReplicaSpec
from .replica_table import ReplicaInfo, ReplicaTable, metadata_key
from .router import Router
from .status import (
    ApplicationStatusOverview,
    DeploymentStatusOverview,
    ServeStatus,
    application_status,
)
from .wire import WireClient

__all__ = ["ServeRuntime"]

_TICK_S = 0.25
_METRICS_S = 0.5
_AVOID_S = 60.0  # a worker whose replica failed its health check gets no new replica for this long
_PLACED_CHECK_S = 1.0  # how often a starting replica's worker is looked for among the scheduler's
FOLLOW_S = 2.0  # how often deployments bound to a model alias (models:/NAME@ALIAS) look where it points


def _new_loop() -> asyncio.AbstractEventLoop:
    """The serve thread's loop: uvloop's when it is installed (the ``serve`` extra), else asyncio's.

    uvloop's sockets, timers and callbacks run in C: the proxy's share of a
    request costs less CPU, which on a small machine is the latency's tail.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return]


@dataclass
class _App:
    name: str
    route_prefix: str | None
    keys: list[Key]
    ingress: Key


@dataclass
class _LiveReplica:
    """What the driver holds for one replica it started, from its start until it stopped."""

    worker: str = ""  # where it was placed ("" until then)
    resources: dict[str, float] = field(default_factory=dict)  # what it takes there
    starting: asyncio.Future[None] | None = None  # its start, while that runs
    future: Any = None  # the Dask future of its actor
    actor: Any = None
    control: WireClient | None = None  # health checks, metrics and draining; None once it failed or stops
    health_due: float = 0.0  # when its next probe is a health check (monotonic)
    probing: bool = False


class ServeRuntime:
    """Serve's driver side: controller + its Dask side (this module) + routers + HTTP proxy on one loop thread."""

    def __init__(self, *, address: str, http_options: HTTPOptions, security: Any = None) -> None:
        self.address, self.http_options = address, http_options
        self.security = security  # the cluster's TLS (a distributed Security), used on every plane
        self.scheme = "http"
        self.host, self.port = http_options.host, http_options.port
        self.loop = _new_loop()
        self.core = Controller()
        self.apps: dict[str, _App] = {}
        self.routes: dict[str, RouteTarget] = {}
        self._specs: dict[Key, tuple[Deployment, tuple[Any, ...], dict[str, Any]]] = {}
        # every version of a deployment's spec that replicas may still be started with (a roll, its rollback)
        self._versions: dict[Key, dict[int, tuple[Deployment, tuple[Any, ...], dict[str, Any]]]] = {}
        self._routers: dict[Key, Router] = {}
        self._published: dict[Key, tuple[tuple[str, ...], str]] = {}  # the replicas last published, and why none
        self._models: dict[str, tuple[str, ...]] = {}  # replica id -> the multiplexed models it last reported
        self._replicas: dict[str, _LiveReplica] = {}  # replica id -> what this driver holds for it
        self._avoid: dict[str, float] = {}  # worker -> until when: it may be cut off (the scheduler lags)
        self._tasks: set[asyncio.Future[Any]] = set()
        self._listening: dict[str, contextlib.ExitStack] = {}  # app -> its control-plane subscription
        self.runtime_id = uuid.uuid4().hex[:12]  # names this runtime in the live serve feed
        self._live_at = time.monotonic()
        self._followed_at = time.monotonic()
        self._following: asyncio.Future[Any] | None = None
        self._registry_store: Any = None
        self._refused: set[str] = set()  # model versions an alias moved to whose replicas failed to start
        self._thread = threading.Thread(target=self._run_loop, name="airflowless-serve", daemon=True)
        self.client: Any = None
        self.server: Any = None
        self._server_task: asyncio.Future[Any] | None = None
        self._tick_task: asyncio.Future[Any] | None = None

    @classmethod
    def on_current_cluster(cls, http_options: HTTPOptions) -> ServeRuntime:
        """A runtime (not started) on this process's cluster: the worker's inside a task (e.g. a pipeline
        stage), else the one ``init()`` connects to or starts."""
        from ..runtime.cluster import get_client

        client = get_client()
        return cls(address=client.scheduler.address, http_options=http_options,
                   security=with_client_role(client.security))

    # -- thread plumbing -------------------------------------------------------------------
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run ``coro`` on the serve loop from another thread and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        self._thread.start()
        try:
            self.call(self._astart(), timeout=60)
        except BaseException:
            self.stop()
            raise

    async def _astart(self) -> None:
        from distributed import Client

        self.client = await Client(self.address, asynchronous=True, set_as_default=False, security=self.security)
        ssl_context = ingress_ssl_context(self.http_options, self.security)
        self.scheme = "https" if ssl_context is not None else "http"
        self.server = make_server(build_app(self.routes, self.http_options), self.http_options, ssl_context)
        self._server_task = asyncio.ensure_future(run_server(self.server))
        while not self.server.started:
            if self._server_task.done():
                exc = self._server_task.exception()
                raise ServeError(f"the HTTP proxy could not listen on {self.host}:{self.port} ({exc}); "
                                 "pick another port with serve.start(http_options={'port': ...})")
            await asyncio.sleep(0.01)
        self.port = uvicorn_bound_port(self.server)
        self._tick_task = asyncio.ensure_future(self._tick_loop())

    def stop(self) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.call(self._astop(), timeout=60)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.loop.close()

    async def _astop(self) -> None:
        for name in list(self.apps):
            with contextlib.suppress(Exception):
                await self.delete(name)
        if self._tick_task is not None:
            self._tick_task.cancel()
        if self.server is not None:
            self.server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._server_task), 10)  # type: ignore[arg-type]
        for task in list(self._tasks):
            task.cancel()
        if self._registry_store is not None:
            with contextlib.suppress(Exception):
                self._registry_store.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- core <-> Dask -----------------------------------------------------------------------
    def feed(self, event: Event) -> None:
        for action in self.core.handle(event):
            self._execute(action)

    def _execute(self, action: Action) -> None:
        if isinstance(action, StartReplica):
            live = self._replicas.setdefault(action.replica_id, _LiveReplica())
            live.starting = self._spawn(self._start_replica(action.key, action.replica_id, action.version))
        elif isinstance(action, StopReplica):
            self._spawn(self._stop_replica(action.key, action.replica_id, drain=action.drain))
        elif isinstance(action, PublishReplicas):
            self._publish(action.key, action.replica_ids, action.unavailable)

    async def _start_replica(self, key: Key, replica_id: str, version: int = 0) -> None:
        deployment, args, kwargs = self._versions.get(key, {}).get(version) or self._specs[key]
        live = self._replicas.setdefault(replica_id, _LiveReplica())
        try:
            worker = await self._place(key, deployment.config)
            live.worker, live.resources = worker, deployment.config.resources
            spec = ReplicaSpec(key[0], key[1], replica_id, deployment.sealed_target(), args, kwargs,
                               deployment.config.user_config, threads=deployment.config.max_concurrency)
            dask_key = f"serve-{replica_id.replace('/', '-').replace('#', '-')}-{uuid.uuid4().hex[:8]}"
            future = self.client.submit(Replica, spec, actor=True, key=dask_key, workers=[worker],
                                        allow_other_workers=False, pure=False)
            live.future = future
            actor = await self._placed(future, worker, replica_id)
            live.actor = actor
            info: ReplicaInfo = await asyncio.wait_for(actor.start(), 60)
            live.control = await WireClient.connect(info.host, info.port, info.token,
                                                                 ssl_context=client_context(self.security),
                                                                 label=f"replica {replica_id}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.feed(ReplicaFailed(replica_id, f"{type(exc).__name__}: {exc}", while_starting=True))
            return
        finally:
            live.starting = None
        live.health_due = time.monotonic() + deployment.config.health_check_period_s
        self.feed(ReplicaStarted(replica_id, info))

    async def _placed(self, future: Any, worker: str, replica_id: str) -> Any:
        """The actor of a replica's task bound to ``worker``, once it ran. :class:`ServeError` once ``worker``
        has left the cluster meanwhile (the scheduler may list a worker just killed when the replica is placed,
        and a task bound to a worker that is gone waits for ever; its nanny's new worker has another address),
        and :class:`TimeoutError` past ``serve_start_timeout_s``."""
        waiting = asyncio.ensure_future(future)
        deadline = time.monotonic() + get_settings().serve_start_timeout_s
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=_PLACED_CHECK_S)
                if done:
                    return waiting.result()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"replica {replica_id} did not start on {worker} within "
                                       f"{get_settings().serve_start_timeout_s:g} s (AIRFLOWLESS_SERVE_START_TIMEOUT_S)")
                if worker not in (await scheduler_identity(self.client)).get("workers", {}):
                    raise ServeError(f"worker {worker} left the cluster while replica {replica_id} started on it")
        finally:
            waiting.cancel()

    async def _place(self, key: Key, config: DeploymentConfig) -> str:
        identity = await scheduler_identity(self.client)
        workers: dict[str, Any] = identity.get("workers", {})
        count: dict[str, int] = dict.fromkeys(workers, 0)
        used: dict[str, dict[str, float]] = {w: {} for w in workers}
        for placed in self._replicas.values():
            if placed.worker in workers:
                count[placed.worker] += 1
                for name, amount in placed.resources.items():
                    used[placed.worker][name] = used[placed.worker].get(name, 0) + amount
        fits = [w for w in workers if all(
            workers[w].get("resources", {}).get(name, 0) - used[w].get(name, 0) >= amount - 1e-9
            for name, amount in config.resources.items())]
        now = time.monotonic()
        fits = [w for w in fits if self._avoid.get(w, 0.0) <= now] or fits
        if not fits:
            declared = {w: workers[w].get("resources", {}) for w in workers}
            raise ServeError(f"no worker has resources {config.resources} free for a replica of "
                             f"{key[0]}/{key[1]}; workers declare {declared} and serve replicas already use "
                             f"{used}; lower the deployment's resources or add workers")
        return min(fits, key=lambda w: (count[w], w))

    def _models_reported(self, key: Key, replica_id: str, models: tuple[str, ...]) -> None:
        """A replica's probe said which models it holds: publish them to the routers when that changed."""
        if self._models.get(replica_id, ()) == models:
            return
        self._models[replica_id] = models
        if key in self._published and replica_id in self._published[key][0]:
            self._publish(key, *self._published[key])

    def _worker_of(self, replica_id: str) -> str:
        live = self._replicas.get(replica_id)
        return live.worker if live is not None else ""

    async def _stop_replica(self, key: Key, replica_id: str, *, drain: bool) -> None:
        live = self._replicas.get(replica_id) or _LiveReplica()
        if live.starting is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(live.starting)
        control, live.control = live.control, None
        deployment = self._specs.get(key, (None,))[0]
        grace = deployment.config.graceful_shutdown_timeout_s if deployment is not None else 5.0
        if drain and control is not None:
            deadline = time.monotonic() + grace
            with contextlib.suppress(Exception):
                while (await asyncio.wait_for(control.call("__drain__", (), {}), 5))["ongoing"] > 0 \
                        and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
        if control is not None:
            await control.close()
        if live.actor is not None and drain:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(live.actor.stop(), 5)
        if live.future is not None:
            with contextlib.suppress(Exception):
                await self.client.cancel([live.future], force=True)
            live.future.release()
        self._replicas.pop(replica_id, None)
        self._models.pop(replica_id, None)
        self.feed(ReplicaStopped(replica_id))

    def _publish(self, key: Key, replica_ids: tuple[str, ...], unavailable: str = "") -> None:
        self._published[key] = (replica_ids, unavailable)
        router = self._routers.get(key)
        deployment = self._specs.get(key, (None,))[0]
        infos = [self.core.info(r) for r in replica_ids]
        models = {r: self._models[r] for r in replica_ids if self._models.get(r)}
        if router is not None:
            router.update(infos, unavailable=unavailable, models=models)
        if deployment is not None:
            table = ReplicaTable(tuple(infos), max_ongoing=deployment.config.max_ongoing_requests,
                                 max_queued=deployment.config.max_queued_requests, unavailable=unavailable,
                                 models=models)
            self._spawn(self.client.set_metadata(metadata_key(*key), table.to_metadata()))

    # -- health and metrics ---------------------------------------------------------------------
    async def _tick_loop(self) -> None:
        from ..control.live import Throttle

        last_metrics = 0.0
        throttle = Throttle()
        while True:
            await asyncio.sleep(_TICK_S)
            now = time.monotonic()
            probes = []
            if now - last_metrics >= _METRICS_S:
                last_metrics = now
                probes = [self._probe(rid) for rid, live in list(self._replicas.items()) if live.control is not None]
            with contextlib.suppress(Exception):
                await asyncio.gather(*probes)
            queued = {key: router.queued for key, router in self._routers.items()}
            self.feed(Tick(time.monotonic(), queued))
            if throttle.due():
                self._publish_live()
            if now - self._followed_at >= FOLLOW_S and self._following is None:
                self._followed_at = now
                self._following = self._spawn(self._follow_models())

    def _publish_live(self) -> None:
        """Tell the scheduler how each deployment serves (:mod:`airflowless.control.live`)."""
        from ..control.live import SERVE_TOPIC, latency_summary, publish

        now = time.monotonic()
        interval, self._live_at = max(now - self._live_at, 1e-3), now
        deployments = []
        for key, dep in self.core.deployments.items():
            router = self._routers.get(key)
            served, latencies = (router.served, list(router.latencies)) if router is not None else (0, [])
            if router is not None:
                router.served = 0
                router.latencies.clear()
            auto = dep.config.autoscaling_config
            deployments.append({
                "app": key[0], "deployment": key[1], "status": self.core.status(key).value,
                "target_replicas": dep.target, "queued": router.queued if router is not None else 0,
                "autoscaling": None if auto is None else {"min_replicas": auto.min_replicas,
                                                          "max_replicas": auto.max_replicas},
                "requests_per_s": served / interval, "requests": served, **latency_summary(latencies),
                "replicas": [{"replica": r.replica_id, "state": r.state.value, "ongoing": r.ongoing,
                              "worker": self._worker_of(r.replica_id)}
                             for r in self.core.replicas_of(key)]})
        if deployments or self.apps:
            coro = publish(self.client, SERVE_TOPIC, {"runtime": self.runtime_id, "deployments": deployments})
            if coro is not None:
                self._spawn(coro)

    async def _probe(self, replica_id: str) -> None:
        live = self._replicas.get(replica_id)
        if live is None or live.control is None or live.probing:
            return
        control = live.control
        replica = self.core.replicas.get(replica_id)
        deployment = self._specs.get(replica.key, (None,))[0] if replica is not None else None
        if replica is None or deployment is None:
            return
        live.probing = True
        health = time.monotonic() >= live.health_due
        try:
            timeout = deployment.config.health_check_timeout_s
            reply = await asyncio.wait_for(control.call("__health__" if health else "__metrics__", (), {}), timeout)
            if health:
                live.health_due = time.monotonic() + deployment.config.health_check_period_s
            self.feed(ReplicaMetrics(replica_id, int(reply["ongoing"])))
        except Exception as exc:
            if live.control is not None:
                live.control = None
                self._avoid[live.worker] = time.monotonic() + _AVOID_S
                with contextlib.suppress(Exception):
                    await control.close()
                self.feed(ReplicaFailed(replica_id, f"health check failed: {type(exc).__name__}: {exc}"))
            return
        finally:
            live.probing = False
        try:  # a replica's answer; what routers learn of its models is no health check
            self._models_reported(replica.key, replica_id, tuple(reply.get("models", ())))
        except Exception:
            logging.getLogger(__name__).exception("serve: could not publish the models replica %s holds", replica_id)

    def _on_router_failure(self, replica_id: str) -> None:
        self._spawn(self._probe(replica_id))

    # -- applications ------------------------------------------------------------------------------
    def router(self, app_name: str, deployment_name: str) -> Router:
        router = self._routers.get((app_name, deployment_name))
        if router is None:
            raise DeploymentNotFoundError(f"no deployment {deployment_name!r} in application {app_name!r} is "
                                          f"running; running: {sorted(self._routers)}")
        return router

    async def deploy(self, name: str, route_prefix: str | None,
                     flat: list[tuple[Deployment, tuple[Any, ...], dict[str, Any]]], *, timeout: float) -> None:
        for other in self.apps.values():
            if other.name != name and route_prefix is not None and other.route_prefix == route_prefix:
                raise ConfigError(f"route_prefix {route_prefix!r} is already used by application "
                                  f"{other.name!r}; pick another prefix or serve.delete({other.name!r})")
        keys = [(name, d.name) for d, _, _ in flat]
        if name in self.apps and self.apps[name].keys == keys and self.apps[name].route_prefix == route_prefix:
            await self._roll(name, keys, flat, timeout=timeout)  # the same deployments: replaced in place
            return
        if name in self.apps:
            await self.delete(name)
        ingress = flat[-1][0]
        self.apps[name] = _App(name, route_prefix, keys, keys[-1])
        for (deployment, args, kwargs), key in zip(flat, keys, strict=True):
            self._specs[key] = (deployment, args, kwargs)
            self._versions[key] = {0: (deployment, args, kwargs)}
            self._routers[key] = Router(f"{name}/{deployment.name}", on_failure=self._on_router_failure,
                                        ssl_context=client_context(self.security),
                                        max_ongoing=deployment.config.max_ongoing_requests,
                                        max_queued=deployment.config.max_queued_requests)
            self.feed(DeploymentUpdated(key, deployment.config))
        deadline = time.monotonic() + timeout
        while True:
            states = {key: self.core.status(key) for key in keys}
            failed = [k for k, s in states.items() if s is DeploymentStatus.DEPLOY_FAILED]
            if failed:
                message = self.core.deployments[failed[0]].message
                await self.delete(name)
                raise ServeError(f"deployment {failed[0][1]!r} of application {name!r} failed to start: {message}")
            if all(s is DeploymentStatus.HEALTHY for s in states.values()):
                break
            if time.monotonic() > deadline:
                raise ServeError(f"application {name!r} was not ready within {timeout:g} s: "
                                 f"{ {k[1]: s.value for k, s in states.items()} }")
            await asyncio.sleep(0.05)
        self._listen(name)
        if route_prefix is not None:
            self.routes[route_prefix] = RouteTarget(name, self._routers[keys[-1]], ingress.http_routes)

    async def _roll(self, name: str, keys: list[Key],
                    flat: list[tuple[Deployment, tuple[Any, ...], dict[str, Any]]], *, timeout: float) -> None:
        """Move application ``name``'s running deployments to new specs without a failed request: each gets a
        new version, its replicas replaced one by one (:mod:`.controller`); ServeError if one is rolled back
        (its old version still serving)."""
        for (deployment, args, kwargs), key in zip(flat, keys, strict=True):
            version = max(self._versions.get(key, {0: None})) + 1
            self._versions.setdefault(key, {})[version] = (deployment, args, kwargs)
            self._specs[key] = (deployment, args, kwargs)
            self.feed(DeploymentUpdated(key, deployment.config, version=version))
        deadline = time.monotonic() + timeout
        while True:
            back = [key for key in keys if self.core.deployments[key].version != max(self._versions[key])]
            if back:
                dep = self.core.deployments[back[0]]
                for key in back:  # serving goes on with what it rolled back to
                    self._specs[key] = self._versions[key][self.core.deployments[key].version]
                raise ServeError(f"deployment {back[0][1]!r} of application {name!r}: {dep.rolled_back}")
            if all(self.core.status(key) is DeploymentStatus.HEALTHY for key in keys):
                break
            if time.monotonic() > deadline:
                raise ServeError(f"application {name!r} was not rolled to its new version within {timeout:g} s: "
                                 f"{ {k[1]: self.core.status(k).value for k in keys} }")
            await asyncio.sleep(0.05)
        for key in keys:  # versions no replica runs and none would roll back to
            live = {r.version for r in self.core.replicas_of(key)}
            self._versions[key] = {v: s for v, s in self._versions[key].items()
                                   if v in live or v == self.core.deployments[key].version}

    def _registry(self) -> Any:
        """The record the model aliases are read from (opened once, on first use)."""
        if self._registry_store is None:
            from ..store import open_store

            self._registry_store = open_store()
        return self._registry_store

    async def _follow_models(self) -> None:
        """Roll each application whose deployments were bound to a model alias that moved since to the version
        it points at now (:mod:`airflowless.models`): as ``serve.run`` again with the new version would."""

        try:
            for app in list(self.apps.values()):
                if app.name not in self.apps or any(
                        self.core.deployments.get(k) is None or self.core.deployments[k].rolling_from is not None
                        for k in app.keys):
                    continue  # deleted, or rolling already
                flat = [self._specs[key] for key in app.keys]
                try:
                    moved = [await _followed(spec, self._registry, self._refused) for spec in flat]
                except Exception as exc:  # the record is away for a moment: the next look tries again
                    logging.getLogger(__name__).warning("cannot look up %s's model aliases: %s", app.name, exc)
                    continue
                if any(new is not None for new in moved):
                    chosen = [new or old for new, old in zip(moved, flat, strict=True)]
                    try:
                        await self._roll(app.name, app.keys, chosen, timeout=get_settings().serve_start_timeout_s)
                    except ServeError as exc:  # not tried again until the alias moves elsewhere
                        tried = {v for spec in chosen for v in served_models(*spec[1:])}
                        self._refused |= tried - {v for spec in flat for v in served_models(*spec[1:])}
                        logging.getLogger(__name__).warning("following a model alias: %s", exc)
                    await asyncio.to_thread(record_models, app.name, {
                        key[1]: served_models(*self._specs[key][1:]) for key in app.keys})
        finally:
            self._following = None

    async def delete(self, name: str, *, timeout: float = 60.0) -> None:
        app = self.apps.pop(name, None)
        if app is None:
            raise DeploymentNotFoundError(f"no application {name!r} is running; running: {sorted(self.apps)}")
        self._listening.pop(name, contextlib.ExitStack()).close()
        if app.route_prefix is not None and self.routes.get(app.route_prefix, None) is not None \
                and self.routes[app.route_prefix].app_name == name:
            del self.routes[app.route_prefix]
        for key in app.keys:
            self.feed(DeploymentDeleted(key))
        deadline = time.monotonic() + timeout
        while any(r.key in app.keys for r in self.core.replicas.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for key in app.keys:
            self._routers.pop(key, None)
            self._published.pop(key, None)
            self._specs.pop(key, None)
            self._versions.pop(key, None)
            with contextlib.suppress(Exception):
                await self.client.set_metadata(metadata_key(*key), None)

    # -- control plane -------------------------------------------------------------------------------
    def _listen(self, app: str) -> None:
        """Take scale requests for ``app`` from the control plane (:mod:`airflowless.control.actions`)."""
        from ..control.actions import listen, serve_topic

        stack = contextlib.ExitStack()
        stack.enter_context(listen(self.client, serve_topic(app), lambda message: self._on_control(app, message)))
        self._listening[app] = stack

    def _on_control(self, app: str, message: dict[str, Any]) -> None:
        if message.get("action") == "scale" and isinstance(message.get("replicas"), int):
            key = (app, str(message.get("deployment")))
            if key in self._specs and key in self.core.deployments:
                self.scale(key, message["replicas"])

    def scale(self, key: Key, replicas: int) -> None:
        """Run ``replicas`` replicas of deployment ``key`` (fixed: its autoscaling bounds are dropped),
        as ``serve.run`` with that ``num_replicas`` would; call on the serve loop."""
        deployment, args, kwargs = self._specs[key]
        deployment = deployment.options(num_replicas=replicas, autoscaling_config=None)
        self._specs[key] = (deployment, args, kwargs)
        version = self.core.deployments[key].version
        self._versions.setdefault(key, {})[version] = (deployment, args, kwargs)
        self.feed(DeploymentUpdated(key, deployment.config, version=version))

    def status(self) -> ServeStatus:
        out = ServeStatus()
        for app in self.apps.values():
            deployments = {}
            for key in app.keys:
                if key not in self.core.deployments:
                    continue
                dep, replicas = self.core.deployments[key], self.core.replicas_of(key)
                states = collections.Counter(r.state.value for r in replicas)
                deployments[key[1]] = DeploymentStatusOverview(
                    status=self.core.status(key).value, message=dep.message, replica_states=dict(states),
                    target_replicas=dep.target, running_replicas=states[_running().value],
                    models=served_models(*self._specs[key][1:]))
            status, message = application_status(deployments)
            out[app.name] = ApplicationStatusOverview(status=status, message=message, route_prefix=app.route_prefix,
                                                      deployments=deployments)
        return out


async def _followed(spec: tuple[Deployment, tuple[Any, ...], dict[str, Any]], registry: Any, refused: set[str]
                    ) -> tuple[Deployment, tuple[Any, ...], dict[str, Any]] | None:
    """``spec`` with each checkpoint bound through a model alias that now points elsewhere moved there (but not to
    a ``refused`` version, one whose replicas failed to start); None if none moved."""
    from ..train.checkpoint import Checkpoint

    deployment, args, kwargs = spec

    async def current(value: Any) -> Any:
        uri = getattr(value, "model_uri", None) if isinstance(value, Checkpoint) else None
        if not uri or "@" not in uri:
            return value
        from .. import models

        found = await asyncio.to_thread(models.resolve, uri, store=registry())
        if found.model_uri == value.model_version or found.model_uri in refused:
            return value
        return await asyncio.to_thread(found.checkpoint_as, uri)

    new_args = tuple([await current(a) for a in args])
    new_kwargs = {k: await current(v) for k, v in kwargs.items()}
    if all(a is b for a, b in zip(new_args, args, strict=True)) and all(new_kwargs[k] is kwargs[k] for k in kwargs):
        return None
    return deployment, new_args, new_kwargs


def _running() -> Any:
    from .controller import ReplicaState

    return ReplicaState.RUNNING

