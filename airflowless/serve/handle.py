"""``DeploymentHandle``: call a deployment from Python (the driver, or another deployment).

>>> handle = serve.run(Echo.bind())                       # doctest: +SKIP
>>> handle.remote({"x": 1}).result()                      # doctest: +SKIP
{'x': 1}
>>> await handle.other_method.remote(2)                    # doctest: +SKIP
>>> await model.remote(pre.remote(body))                  # doctest: +SKIP
>>> for token in handle.options(stream=True).generate.remote("hi"):  # doctest: +SKIP
...     print(token)

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
import contextlib
import time
from collections.abc import Generator
from typing import Any

from .._dask_internals import get_scheduler_metadata
from ..errors import ConfigError
from ..runtime.tls import client_context
from .context import current_runtime, host_worker
from .errors import DeploymentNotFoundError, ServeError
from .replica_table import ReplicaTable, metadata_key
from .router import Router
from .wire import RemoteStream

__all__ = ["DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator"]

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
                      unavailable=table.unavailable, models=table.models)
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


class DeploymentResponseGenerator:
    """The items of a streaming call, ``handle.options(stream=True).method.remote(...)``: iterate it.

    ``async for`` on the event loop the call runs on (inside a deployment),
    ``for`` from any other thread (a driver, a notebook). Leaving the loop early
    cancels the generator on the replica.
    """

    def __init__(self, response: DeploymentResponse) -> None:
        self._response = response
        self._stream: RemoteStream | None = None

    async def _opened(self) -> RemoteStream:
        if self._stream is None:
            self._stream = await self._response
        return self._stream

    async def _step(self) -> Any:
        """The next item, or :data:`_END`; runs on the loop of the call."""
        try:
            return await (await self._opened()).__anext__()
        except StopAsyncIteration:
            return _END

    def __aiter__(self) -> DeploymentResponseGenerator:
        return self

    async def __anext__(self) -> Any:
        loop = self._response._loop
        if asyncio.get_running_loop() is loop:
            item = await self._step()
        else:  # another loop (asyncio.run in a driver): the stream lives on the call's loop
            item = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._step(), loop))
        if item is _END:
            raise StopAsyncIteration
        return item

    def __iter__(self) -> DeploymentResponseGenerator:
        return self

    def __next__(self) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._response._loop:
            raise ServeError("a sync `for` over the stream would block the event loop it runs on; "
                             "use `async for` in async code")
        item = asyncio.run_coroutine_threadsafe(self._step(), self._response._loop).result()
        if item is _END:
            raise StopIteration
        return item

    def cancel(self) -> None:
        """Stop the stream early from any thread (one not iterated yet is closed as soon as it opens)."""
        loop = self._response._loop
        if loop.is_closed():
            return
        if self._stream is not None:
            asyncio.run_coroutine_threadsafe(self._stream.aclose(), loop)
            return

        def close_when_open(done: Any) -> None:
            if not done.cancelled() and done.exception() is None and isinstance(done.result(), RemoteStream):
                asyncio.run_coroutine_threadsafe(done.result().aclose(), loop)
        self._response._future.add_done_callback(close_when_open)

    def __del__(self) -> None:  # a loop left early: the replica's generator must not wait for a reader forever
        with contextlib.suppress(Exception):
            self.cancel()


_END = object()


class DeploymentHandle:
    """Calls one deployment's method: ``handle.remote(...)``, ``handle.method.remote(...)``.

    ``handle.options(stream=True)`` calls a generator method and gives a
    :class:`DeploymentResponseGenerator`; ``handle.options(method_name=...)``
    picks the method; ``handle.options(multiplexed_model_id="a")`` names the
    model the call is for (:mod:`.multiplex`).
    """

    def __init__(self, app_name: str, deployment_name: str, method_name: str = "__call__", *,
                 stream: bool = False, multiplexed_model_id: str = "") -> None:
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.method_name = method_name
        self.stream = stream
        self.multiplexed_model_id = multiplexed_model_id

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def options(self, *, method_name: str | None = None, stream: bool | None = None,
                multiplexed_model_id: str | None = None) -> DeploymentHandle:
        """A handle like this one with the given options changed (Ray's names)."""
        if multiplexed_model_id is not None and not isinstance(multiplexed_model_id, str):
            raise ConfigError(f"multiplexed_model_id is a str, got {type(multiplexed_model_id).__name__}")
        return DeploymentHandle(
            self.app_name, self.deployment_name, method_name or self.method_name,
            stream=self.stream if stream is None else stream,
            multiplexed_model_id=self.multiplexed_model_id if multiplexed_model_id is None else multiplexed_model_id)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the method: a :class:`DeploymentResponse`, or with ``stream=True`` a generator of its items."""
        loop, get_router = _locate(self.app_name, self.deployment_name)
        stream, where = self.stream, f"{self.deployment_name}.{self.method_name}"

        async def go() -> Any:
            # Ray's composition idiom, model.remote(pre.remote(x)): a response passed in is its result
            call_args = tuple([await a if isinstance(a, DeploymentResponse) else a for a in args])
            call_kwargs = {k: await v if isinstance(v, DeploymentResponse) else v for k, v in kwargs.items()}
            router = await get_router()
            answer = await router.call(self.method_name, call_args, call_kwargs, model_id=self.multiplexed_model_id)
            if isinstance(answer, RemoteStream) and not stream:
                await answer.aclose()
                raise ServeError(f"{where} is a generator (it streams); call it through "
                                 "handle.options(stream=True) and iterate what remote() returns")
            if stream and not isinstance(answer, RemoteStream):
                raise ServeError(f"{where} returned one value, not a stream; call it without stream=True, "
                                 "or make it a generator")
            return answer

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            response = DeploymentResponse(asyncio.ensure_future(go()), loop)
        else:
            response = DeploymentResponse(asyncio.run_coroutine_threadsafe(go(), loop), loop)
        return DeploymentResponseGenerator(response) if stream else response

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.app_name, self.deployment_name, self.method_name, self.stream,
                           self.multiplexed_model_id))

    def __repr__(self) -> str:
        method = "" if self.method_name == "__call__" else f", method={self.method_name!r}"
        stream = ", stream=True" if self.stream else ""
        model = f", multiplexed_model_id={self.multiplexed_model_id!r}" if self.multiplexed_model_id else ""
        return f"DeploymentHandle({self.app_name!r}, {self.deployment_name!r}{method}{stream}{model})"


def _rebuild(app_name: str, deployment_name: str, method_name: str, stream: bool,
             multiplexed_model_id: str) -> DeploymentHandle:
    return DeploymentHandle(app_name, deployment_name, method_name, stream=stream,
                            multiplexed_model_id=multiplexed_model_id)
