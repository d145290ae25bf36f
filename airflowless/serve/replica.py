"""One replica: a Dask actor that builds the user's object and serves it over :mod:`.wire`.

Lifecycle: the driver (:mod:`.driver`) submits ``Replica(spec)`` with ``actor=True`` pinned to
a worker (the constructor runs the user's ``__init__`` in a worker thread,
then ``reconfigure(user_config)`` if defined); ``start()`` (async, on the
worker's event loop) opens the data-plane socket and returns where it is;
``stop()`` closes it. The replica is also kept in the airflowless worker
plugin's state, so a closing worker closes it.

The controller holds a lease on each replica: every control call it makes
(``__metrics__``, ``__health__``, ``__drain__``, about twice a second) renews
it for ``spec.lease_s`` (``AIRFLOWLESS_SERVE_LEASE_S`` where the controller
runs, default 10 s); a control call still running on an open connection
holds it too (a slow ``check_health``). A replica whose lease lapses (its controller was
killed, or cut off) stops itself: it closes its socket and removes its
deployment's replica table from the scheduler if its controller published
it. :func:`stop_replicas` stops the replicas of given controllers at once
(``airflowless serve shutdown`` runs it on every worker).

Why a Dask actor and not a process hosted by the worker plugin: the actor gets
placement, resources, lifetime and loss detection from Dask for free, and the
user's code runs inside the worker process, so there is no second hop. The
one thing Dask's actor RPC is slow at, per-request calls, goes through the
replica's own socket instead (figures in :mod:`.wire`).

Cancelled requests: a request its caller stopped waiting for (the wire's
cancel frame: the HTTP client left, or the proxy's ``request_timeout_s``
passed) is cancelled here too. An ``async`` method gets ``CancelledError`` at
its next ``await`` and its slot is free at once. A plain ``def`` method runs
in one of the replica's threads (``max_concurrency`` of them, default one),
where Python cannot interrupt it: while every thread is held by such a call,
new requests that need one are refused (:class:`.wire.Busy`:
the router sends them to another replica), and if one still runs
:data:`STUCK_AFTER_S` after its caller left, the replica is *stuck*: it
refuses them for good (the router drops it) and answers the controller's next health or metrics probe
with :class:`ReplicaStuckError`, so the controller replaces it with a fresh
replica. The abandoned thread itself runs on in the worker until the call
returns (no thread can be killed); restart the worker to reclaim it.

The replica freezes its heap when it starts (:mod:`.heap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import itertools
import logging
import os
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .._dask_internals import get_scheduler_metadata, set_scheduler_metadata
from ..pickled import Sealed
from ..runtime.plugins import PLUGIN_NAME
from .context import set_host_worker
from .errors import BadRequestError, ReplicaStuckError
from .heap import freeze_heap
from .ingress import ASGI_METHOD, ReplicaApp, ingress_app
from .multiplex import loaded_models, model_id_scope
from .replica_table import ReplicaInfo, ReplicaTable, metadata_key
from .streaming import as_stream
from .wire import Busy, Connection, Rejected, WireServer

__all__ = ["Replica", "ReplicaSpec", "controller_identity", "stop_replicas"]

log = logging.getLogger(__name__)

_LEASE_CHECK_S = 0.5
_CONTROL_METHODS = frozenset({"__metrics__", "__health__", "__drain__"})
_STATE_PREFIX = "serve-replica:"
STUCK_AFTER_S = 2.0
"""How long a plain ``def`` call may run on after its caller left before the replica counts as stuck."""


def controller_identity() -> str:
    """``host:pid`` of the calling process: the controller that owns the replicas it starts."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _lease_s() -> float:
    from ..settings import get_settings

    return get_settings().serve_lease_s


@dataclass(frozen=True)
class ReplicaSpec:
    app_name: str
    deployment_name: str
    replica_id: str
    target: Any  # the class or function, sealed (:mod:`..pickled`): opened on the worker
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    user_config: Any = None
    threads: int = 1  # the deployment's max_concurrency: plain ``def`` calls that run at once
    # both made where the spec is built, in the controller's process
    owner: str = field(default_factory=controller_identity)
    lease_s: float = field(default_factory=_lease_s)


class Replica:
    """The actor hosting one replica of a deployment (see the module docstring)."""

    def __init__(self, spec: ReplicaSpec) -> None:
        self.spec = spec
        target = spec.target.open() if isinstance(spec.target, Sealed) else spec.target
        self.is_function = not inspect.isclass(target)
        self.user = target if self.is_function else target(*spec.args, **spec.kwargs)
        if spec.user_config is not None and hasattr(self.user, "reconfigure"):
            self.user.reconfigure(spec.user_config)
        marked = ingress_app(target)
        self._asgi = ReplicaApp(marked, self.user) if marked is not None else None
        self.ongoing = 0
        self.draining = False
        self.stopped = False
        self._executor = ThreadPoolExecutor(spec.threads, thread_name_prefix=f"serve-{spec.replica_id}")
        # a plain generator's steps and its close go one after another on one thread (see .streaming)
        self._stream_steps = self._executor if spec.threads == 1 else ThreadPoolExecutor(
            1, thread_name_prefix=f"serve-{spec.replica_id}-streams")
        self._server: WireServer | None = None
        self._worker: Any = None
        self._state_key = f"{_STATE_PREFIX}{spec.replica_id}:{secrets.token_hex(4)}"
        self._token = b""
        self._lease_until = float("inf")
        self._controller_calls: dict[int, Connection] = {}
        self._calls = itertools.count()
        self._watchdog: asyncio.Future[None] | None = None
        self._abandoned: dict[int, tuple[str, float]] = {}  # thread calls whose caller left: name, when
        self._register()

    def _register(self) -> None:
        from distributed import get_worker

        from ..runtime.plugins import worker_state

        self._worker = get_worker()
        worker_state()[self._state_key] = self
        set_host_worker(self._worker)

    async def start(self) -> ReplicaInfo:
        from distributed.comm import get_address_host

        host = get_address_host(self._worker.address)
        self._token = secrets.token_bytes(32)
        from ..runtime.tls import server_context

        self._server = WireServer(self._dispatch, self._token,
                                  ssl_context=server_context(self._worker.security, "worker"))
        if self._asgi is not None:
            await self._asgi.startup()
        port = await self._server.start(host)
        freeze_heap()  # the user's model is loaded: keep full collections from stalling requests
        self._lease_until = time.monotonic() + self.spec.lease_s
        self._watchdog = asyncio.ensure_future(self._watch_lease())
        return ReplicaInfo(self.spec.replica_id, host, port, self._token, os.getpid(), self._worker.address,
                           self.spec.owner)

    # -- the controller's lease -------------------------------------------------------------
    def _lease_held(self, now: float) -> bool:
        return now < self._lease_until or any(c.open for c in self._controller_calls.values())

    async def _watch_lease(self) -> None:
        while self._lease_held(time.monotonic()):
            await asyncio.sleep(_LEASE_CHECK_S)
        log.warning("serve replica %s heard nothing from its controller %s for %g s; it stops itself",
                    self.spec.replica_id, self.spec.owner, self.spec.lease_s)
        self._watchdog = None
        await self.stop()
        with contextlib.suppress(Exception):
            await self.forget_published()

    async def forget_published(self) -> None:
        """Remove the deployment's replica table from the scheduler if this replica's controller wrote it."""
        key = metadata_key(self.spec.app_name, self.spec.deployment_name)
        table = await get_scheduler_metadata(self._worker, key)
        if table and ReplicaTable.from_metadata(table).written_by(self._token):
            await set_scheduler_metadata(self._worker, key, None)

    def _stuck(self) -> str:
        """Why this replica's thread is lost to a call nobody waits for, or "" while it is not."""
        now = time.monotonic()
        for name, left_at in list(self._abandoned.values()):
            if now - left_at > STUCK_AFTER_S:
                return (f"replica {self.spec.replica_id} of {self.spec.deployment_name!r} is stuck: a call to "
                        f"{name} still runs {now - left_at:.0f} s after its caller stopped waiting")
        return ""

    async def _control(self, method: str, connection: Connection) -> dict[str, Any]:
        stuck = self._stuck()
        if stuck:  # the controller replaces this replica
            raise ReplicaStuckError(stuck)
        self._lease_until = time.monotonic() + self.spec.lease_s
        call = next(self._calls)
        self._controller_calls[call] = connection
        try:
            if method == "__health__":
                check = getattr(self.user, "check_health", None)
                if callable(check) and not self.is_function:
                    await self._run(check, (), {})
            elif method == "__drain__":
                self.draining = True
            return {"ongoing": self.ongoing, "models": [] if self.is_function else loaded_models(self.user)}
        finally:
            del self._controller_calls[call]
            self._lease_until = time.monotonic() + self.spec.lease_s

    # -- requests -----------------------------------------------------------------------------
    async def _dispatch(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        connection: Connection, model_id: str = "") -> Any:
        if method in _CONTROL_METHODS:
            return await self._control(method, connection)
        if self.draining:
            raise Rejected(f"replica {self.spec.replica_id} is draining")
        fn = self._method(method)
        if self._abandoned and not _is_async(fn):  # threads taken by calls nobody waits for
            stuck = self._stuck()
            if stuck:
                raise Rejected(stuck)
            if len(self._abandoned) >= self.spec.threads:
                raise Busy(f"replica {self.spec.replica_id} still runs calls their callers left; "
                           "try another replica")
        if model_id:  # this request's task (and the thread call below) sees it
            model_id_scope(model_id)
        self.ongoing += 1
        stream = None
        try:
            result = await self._run(fn, args, kwargs)
            stream = as_stream(result, self._stream_steps)
            return result if stream is None else stream
        finally:
            if stream is None:
                self.ongoing -= 1
            else:  # it runs on while the wire sends its items
                stream.on_close = self._stream_ended

    def _stream_ended(self) -> None:
        self.ongoing -= 1

    def _method(self, name: str) -> Any:
        if name == ASGI_METHOD and self._asgi is not None:
            return self._asgi
        if self.is_function:
            if name != "__call__":
                raise BadRequestError(f"deployment {self.spec.deployment_name!r} is a function; it has no "
                                      f"method {name!r}")
            return self.user
        if name != "__call__" and name.startswith("_"):
            raise BadRequestError(f"method {name!r} of {self.spec.deployment_name!r} is private")
        fn = getattr(self.user, name, None)
        if not callable(fn):
            raise BadRequestError(f"deployment {self.spec.deployment_name!r} has no method {name!r}")
        return fn

    async def _run(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _is_async(fn):
            return await fn(*args, **kwargs)
        if inspect.isasyncgenfunction(fn):
            return fn(*args, **kwargs)
        call = self._executor.submit(contextvars.copy_context().run, functools.partial(fn, *args, **kwargs))
        try:
            result = await asyncio.wrap_future(call)
        except asyncio.CancelledError:
            if call.running():  # Python cannot stop it: remember it until it returns (see the module docstring)
                key = id(call)
                self._abandoned[key] = (getattr(fn, "__qualname__", repr(fn)), time.monotonic())
                call.add_done_callback(lambda _: self._abandoned.pop(key, None))
            raise
        return await result if inspect.isawaitable(result) else result

    async def stop(self) -> None:
        """Close the socket and every connection, and let the user's object go."""
        if self._server is not None:
            await self._server.close()
        if self._asgi is not None:
            await self._asgi.shutdown()
        self.close()

    def close(self) -> None:
        """Stop serving without waiting (the worker plugin calls it when the worker closes)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._stream_steps.shutdown(wait=False, cancel_futures=True)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        with contextlib.suppress(Exception):  # the worker is closing
            self._worker.plugins[PLUGIN_NAME].state.pop(self._state_key, None)
        if self._server is not None:
            self._server.stop_listening()
        self.stopped = True


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def stop_replicas(owners: list[str], dask_worker: Any = None) -> list[str]:
    """Stop this worker's replicas started by any of the controllers ``owners`` (``host:pid``).

    Run on every worker with ``client.run(stop_replicas, owners)``; returns the ids of the replicas stopped.
    """
    state = dask_worker.plugins[PLUGIN_NAME].state if dask_worker is not None else {}
    stopped = []
    for key, replica in list(state.items()):
        if key.startswith(_STATE_PREFIX) and isinstance(replica, Replica) and replica.spec.owner in owners:
            await replica.stop()
            with contextlib.suppress(Exception):
                await replica.forget_published()
            stopped.append(replica.spec.replica_id)
    return stopped
