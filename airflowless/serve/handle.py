"""``DeploymentHandle``: call a deployment from Python (the driver, or another deployment).

>>> handle = serve.run(Echo.bind())                       # doctest: +SKIP
>>> handle.remote({"x": 1}).result()                      # doctest: +SKIP
{'x': 1}
>>> await handle.other_method.remote(2)                    # doctest: +SKIP
>>> await model.remote(pre.remote(body))                  # doctest: +SKIP

A :class:`DeploymentResponse` given as an argument (not nested inside one)
is awaited first and its result passed on, as in Ray Serve.

A handle pickles to (application, deployment, method); where it is used it
finds the router of its process: the driver's (fed by the controller) or, on
a worker, one refreshed from the replica table the controller publishes in
the scheduler's metadata.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Generator
from typing import Any

from .._dask_internals import get_scheduler_metadata
from ..runtime.tls import client_context
from .context import current_runtime, host_worker
from .errors import DeploymentNotFoundError, ServeError
from .replica_table import ReplicaTable, metadata_key
from .router import Router

__all__ = ["DeploymentHandle", "DeploymentResponse"]

_REFRESH_S = 1.0


class _WorkerRouters:
    """Routers of a worker process, refreshed from the scheduler's metadata."""

    def __init__(self) -> None:
        self.routers: dict[tuple[str, str], tuple[Router, float]] = {}

    async def get(self, worker: Any, app: str, deployment: str) -> Router:
        entry = self.routers.get((app, deployment))
        now = time.monotonic()
        if entry is not None and now - entry[1] < _REFRESH_S and entry[0].replica_ids:
            return entry[0]
        data = await get_scheduler_metadata(worker, metadata_key(app, deployment))
        if data is None:
            raise DeploymentNotFoundError(f"no deployment {deployment!r} in application {app!r} is running")
        table = ReplicaTable.from_metadata(data)
        router = entry[0] if entry is not None else Router(
            f"{app}/{deployment}", max_ongoing=table.max_ongoing, max_queued=table.max_queued,
            ssl_context=client_context(worker.security, "worker"))
        router.update(list(table.replicas), max_ongoing=table.max_ongoing, max_queued=table.max_queued,
                      unavailable=table.unavailable)
        self.routers[(app, deployment)] = (router, now)
        return router


_worker_routers = _WorkerRouters()


def _locate(app: str, deployment: str) -> tuple[asyncio.AbstractEventLoop, Any]:
    """The loop to route on here, and a coroutine function giving the router."""
    runtime = current_runtime()
    if runtime is not None:
        async def driver_router() -> Router:
            return runtime.router(app, deployment)
        return runtime.loop, driver_router
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # not a Dask task's thread: a replica's own (a plain ``def`` method), or no serve at all
        worker = host_worker()
        if worker is None:
            raise ServeError("serve is not running in this process; call serve.run(app) first") from None

    async def worker_router() -> Router:
        return await _worker_routers.get(worker, app, deployment)
    return worker.loop.asyncio_loop, worker_router  # type: ignore[attr-defined]


class DeploymentResponse:
    """The pending result of ``handle.remote(...)``: ``await`` it, or call ``.result()`` from sync code."""

    def __init__(self, future: asyncio.Future[Any] | concurrent.futures.Future[Any],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._future = future
        self._loop = loop

    def __await__(self) -> Generator[Any, None, Any]:
        if isinstance(self._future, concurrent.futures.Future):
            return asyncio.wrap_future(self._future).__await__()
        return self._future.__await__()

    def result(self, timeout: float | None = None) -> Any:
        if isinstance(self._future, concurrent.futures.Future):
            return self._future.result(timeout)
        raise ServeError("response.result() would block the event loop this request runs on; "
                         "use `await response` in async code")

    def done(self) -> bool:
        return self._future.done()


class DeploymentHandle:
    """Calls one deployment's method: ``handle.remote(...)``, ``handle.method.remote(...)``."""

    def __init__(self, app_name: str, deployment_name: str, method_name: str = "__call__") -> None:
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.method_name = method_name

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return DeploymentHandle(self.app_name, self.deployment_name, name)

    def options(self, *, method_name: str | None = None) -> DeploymentHandle:
        return DeploymentHandle(self.app_name, self.deployment_name, method_name or self.method_name)

    def remote(self, *args: Any, **kwargs: Any) -> DeploymentResponse:
        loop, get_router = _locate(self.app_name, self.deployment_name)

        async def go() -> Any:
            # Ray's composition idiom, model.remote(pre.remote(x)): a response passed in is its result
            call_args = tuple([await a if isinstance(a, DeploymentResponse) else a for a in args])
            call_kwargs = {k: await v if isinstance(v, DeploymentResponse) else v for k, v in kwargs.items()}
            router = await get_router()
            return await router.call(self.method_name, call_args, call_kwargs)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return DeploymentResponse(asyncio.ensure_future(go()), loop)
        return DeploymentResponse(asyncio.run_coroutine_threadsafe(go(), loop), loop)

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (DeploymentHandle, (self.app_name, self.deployment_name, self.method_name))

    def __repr__(self) -> str:
        method = "" if self.method_name == "__call__" else f", method={self.method_name!r}"
        return f"DeploymentHandle({self.app_name!r}, {self.deployment_name!r}{method})"
