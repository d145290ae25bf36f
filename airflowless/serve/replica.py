"""One replica: a Dask actor that builds the user's object and serves it over :mod:`.wire`.

Lifecycle: the adapter submits ``Replica(spec)`` with ``actor=True`` pinned to
a worker (the constructor runs the user's ``__init__`` in a worker thread,
then ``reconfigure(user_config)`` if defined); ``start()`` (async, on the
worker's event loop) opens the data-plane socket and returns where it is;
``stop()`` closes it. The replica is also kept in the airflowless worker
plugin's state, so a closing worker closes it.

Why a Dask actor and not a process hosted by the worker plugin: the actor gets
placement, resources, lifetime and loss detection from Dask for free, and the
user's code runs inside the worker process, so there is no second hop. The
one thing Dask's actor RPC is slow at, per-request calls, goes through the
replica's own socket instead (figures in :mod:`.wire`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .errors import BadRequestError
from .wire import Rejected, WireServer

__all__ = ["Replica", "ReplicaSpec", "ReplicaInfo"]


@dataclass(frozen=True)
class ReplicaSpec:
    app_name: str
    deployment_name: str
    replica_id: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    user_config: Any = None


@dataclass(frozen=True)
class ReplicaInfo:
    """Where a running replica listens."""

    replica_id: str
    host: str
    port: int
    token: bytes
    pid: int
    worker: str


class Replica:
    """The actor hosting one replica of a deployment (see the module docstring)."""

    def __init__(self, spec: ReplicaSpec) -> None:
        self.spec = spec
        self.is_function = not inspect.isclass(spec.target)
        self.user = spec.target if self.is_function else spec.target(*spec.args, **spec.kwargs)
        if spec.user_config is not None and hasattr(self.user, "reconfigure"):
            self.user.reconfigure(spec.user_config)
        self.ongoing = 0
        self.draining = False
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"serve-{spec.replica_id}")
        self._server: WireServer | None = None
        self._worker_address = ""
        self._register()

    def _register(self) -> None:
        from distributed import get_worker

        from ..runtime.plugins import worker_state

        worker = get_worker()
        self._worker_address = worker.address
        worker_state()[f"serve-replica:{self.spec.replica_id}"] = self

    async def start(self) -> ReplicaInfo:
        from distributed.comm import get_address_host

        host = get_address_host(self._worker_address)
        token = secrets.token_bytes(16)
        self._server = WireServer(self._dispatch, token)
        port = await self._server.start(host)
        return ReplicaInfo(self.spec.replica_id, host, port, token, os.getpid(), self._worker_address)

    async def _dispatch(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method == "__metrics__":
            return {"ongoing": self.ongoing}
        if method == "__health__":
            check = getattr(self.user, "check_health", None)
            if callable(check) and not self.is_function:
                await self._run(check, (), {})
            return {"ongoing": self.ongoing}
        if method == "__drain__":
            self.draining = True
            return {"ongoing": self.ongoing}
        if self.draining:
            raise Rejected(f"replica {self.spec.replica_id} is draining")
        self.ongoing += 1
        try:
            return await self._run(self._method(method), args, kwargs)
        finally:
            self.ongoing -= 1

    def _method(self, name: str) -> Any:
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
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
            return await fn(*args, **kwargs)
        result = await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, *args, **kwargs))
        return await result if inspect.isawaitable(result) else result

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.close()
        self.close()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        try:
            from ..runtime.plugins import worker_state

            worker_state().pop(f"serve-replica:{self.spec.replica_id}", None)
        except Exception:  # noqa: S110 - the worker is closing
            pass
        if self._server is not None and self._server._server is not None:
            self._server._server.close()
