"""``@serve.ingress(app)``: a FastAPI app whose routes are a deployment's methods, as in Ray Serve.

>>> from fastapi import FastAPI
>>> from airflowless import serve
>>> app = FastAPI()
>>> @serve.deployment
... @serve.ingress(app)
... class Api:
...     def __init__(self, scale: float):
...         self.scale = scale
...     @app.get("/scaled/{x}")
...     def scaled(self, x: float, offset: float = 0.0) -> dict:
...         return {"y": x * self.scale + offset}
>>> sorted(Api.http_routes)
['']

Every request under the deployment's route prefix goes to one of its
replicas, where the app runs as ASGI with ``root_path`` set to the prefix:
path and query parameters, dependency injection, validation (422), response
models, ``StreamingResponse`` (:mod:`.streaming`) and the app's OpenAPI pages
(``{prefix}/docs``, ``{prefix}/openapi.json``) work as in FastAPI. Each replica
runs its own copy of the app, in which the routes written in the class call
that replica's instance as ``self``; routes written outside the class are
served as they are. Any other ASGI app (a Starlette one) is served as it is.

How it travels: the app is pickled by value once, with the class (Starlette's
``State`` taught to pickle, :func:`.._library_internals.let_starlette_state_pickle`),
and unpickled afresh for each replica. The class's route methods carry their
signatures with annotations resolved where the class is written, so FastAPI
reads the same parameters on a worker that has no copy of the user's module
(``from __future__ import annotations`` makes them strings). A request crosses as :class:`.http_request.RequestData` (scope and
body, read and bounded by the proxy, never unpickled from a client); the
answer comes back as one Starlette ``Response``, or as a stream when the app
sends its body in parts. The app's lifespan (``lifespan=``, startup and
shutdown events) runs on each replica, from its start (a startup that fails
fails the replica) to its stop; what it yields is each request's
``request.state``. Not yet: websockets are not proxied.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import pickle
import typing
from collections.abc import AsyncIterator, Callable
from typing import Any

import cloudpickle
from starlette.requests import Request
from starlette.responses import Response

from .._library_internals import fastapi_route_with_endpoint, let_starlette_state_pickle
from ..errors import ConfigError
from .errors import ServeError
from .streaming import ResponseHead
from .wire import STREAM_WINDOW, Stream

__all__ = ["ingress", "ingress_app", "ReplicaApp", "ASGI_METHOD"]

let_starlette_state_pickle()

_MARK = "__airflowless_ingress__"
ASGI_METHOD = "__asgi__"
"""The name the proxy calls on an ingress deployment's replica with each HTTP request."""


class _MarkedApp:
    """The app a class was marked with; each unpickling gives a fresh copy of the app for one replica."""

    def __init__(self, app: Any = None, pickled: bytes = b"") -> None:
        self._app, self._pickled = app, pickled

    def pickled(self) -> bytes:
        return self._pickled or cloudpickle.dumps(self._app, protocol=5)

    def fresh(self) -> Any:
        """A copy of the app of its own (a replica binds the routes of its copy to its instance)."""
        return pickle.loads(self.pickled())

    def __reduce__(self) -> tuple[Any, tuple[None, bytes]]:
        return (_MarkedApp, (None, self.pickled()))


def ingress(app: Any) -> Callable[[type], type]:
    """Serve the deployment class over HTTP through ``app`` (FastAPI or any ASGI app); put it under
    ``@serve.deployment``."""
    if not callable(app):
        raise ConfigError(f"@serve.ingress takes an ASGI app such as FastAPI(), got {type(app).__name__}")

    def mark(cls: type) -> type:
        if not inspect.isclass(cls):
            raise ConfigError(f"@serve.ingress(app) goes on a class whose methods are the app's routes, got "
                              f"{type(cls).__name__} {getattr(cls, '__name__', '')!r}; write a class, or "
                              "serve a function deployment that takes a Starlette Request")
        for route in getattr(app, "routes", []):
            endpoint = getattr(route, "endpoint", None)
            if inspect.isfunction(endpoint) and _written_in(endpoint, cls):
                _resolve_annotations(endpoint)
        setattr(cls, _MARK, _MarkedApp(app))
        return cls
    return mark


def _written_in(fn: Any, cls: type) -> bool:
    """Whether ``fn`` is (a copy of) a method written in ``cls`` or one of its bases.

    The app travels in a pickle of its own, so its endpoints are copies of the
    class's functions: they are told by name and code, not by identity.
    """
    for base in cls.__mro__:
        method = vars(base).get(fn.__name__)
        if inspect.isfunction(method) and method.__code__ == fn.__code__:
            return True
    return False


def _resolve_annotations(fn: Any) -> None:
    """Give ``fn`` a ``__signature__`` whose annotations are types, resolved in ``fn``'s module now."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # a name that does not resolve: FastAPI will say so, as it would without us
        return
    signature = inspect.signature(fn)
    fn.__signature__ = signature.replace(
        parameters=[p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()],
        return_annotation=hints.get("return", signature.return_annotation))


def ingress_app(target: Any) -> _MarkedApp | None:
    """The app ``target`` was marked with by :func:`ingress`, or None."""
    marked = getattr(target, _MARK, None) if inspect.isclass(target) else None
    return marked if isinstance(marked, _MarkedApp) else None


class ReplicaApp:
    """One replica's copy of an ingress app, its class's routes calling ``instance``; its lifespan runs from
    :meth:`startup` to :meth:`shutdown` (the replica's start and stop)."""

    def __init__(self, marked: _MarkedApp, instance: Any) -> None:
        self.app = marked.fresh()
        router = getattr(self.app, "router", None)
        routes = getattr(router, "routes", None)
        if isinstance(routes, list):
            routes[:] = [self._bound(route, instance) for route in routes]
        self.state: dict[str, Any] = {}  # what the lifespan yields: each request's ``request.state`` starts from it
        self._lifespan: asyncio.Future[None] | None = None
        self._events: asyncio.Queue[dict[str, Any]] | None = None
        self._ended: asyncio.Future[None] | None = None

    async def startup(self) -> None:
        """Run the app's lifespan up to its startup (FastAPI's ``lifespan=`` or ``on_event("startup")``);
        :class:`ServeError` if it fails. An app without a lifespan is fine (the ASGI spec's rule)."""
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        ended: asyncio.Future[None] = loop.create_future()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def send(message: dict[str, Any]) -> None:
            kind = message["type"]
            if kind == "lifespan.startup.complete" and not started.done():
                started.set_result(None)
            elif kind == "lifespan.startup.failed" and not started.done():
                lines = str(message.get("message", "")).strip().splitlines()  # Starlette sends the traceback
                started.set_exception(ServeError(f"the app's startup failed: {lines[-1] if lines else 'no reason given'}"))
            elif kind.startswith("lifespan.shutdown.") and not ended.done():
                ended.set_result(None)

        def finished(task: asyncio.Future[None]) -> None:
            for future in (started, ended):  # an app that refuses the lifespan scope has none
                if not future.done():
                    future.set_result(None)

        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        self._lifespan, self._events, self._ended = asyncio.ensure_future(self.app(scope, events.get, send)), \
            events, ended
        self._lifespan.add_done_callback(finished)
        events.put_nowait({"type": "lifespan.startup"})
        await started

    async def shutdown(self, timeout_s: float = 10.0) -> None:
        """Run the lifespan's shutdown (within ``timeout_s``), then stop it."""
        if self._lifespan is None or self._events is None or self._ended is None:
            return
        if not self._lifespan.done():
            self._events.put_nowait({"type": "lifespan.shutdown"})
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._ended), timeout_s)
        self._lifespan.cancel()

    @staticmethod
    def _bound(route: Any, instance: Any) -> Any:
        from fastapi.routing import APIRoute

        endpoint = getattr(route, "endpoint", None)
        if not isinstance(route, APIRoute) or not inspect.isfunction(endpoint) or not _written_in(endpoint, type(instance)):
            return route  # written outside the class: served as it is
        return fastapi_route_with_endpoint(route, getattr(instance, endpoint.__name__))

    async def __call__(self, request: Request) -> Response | Stream:
        """Run the app on ``request``: its complete response, or a stream once it sends its body in parts."""
        return await call_asgi(self.app, {**request.scope, "state": dict(self.state)}, await request.body())


async def call_asgi(app: Any, scope: dict[str, Any], body: bytes) -> Response | Stream:
    """``app``'s answer to one HTTP request; cancelling the call cancels the app."""
    loop = asyncio.get_running_loop()
    scope.setdefault("asgi", {"version": "3.0", "spec_version": "2.4"})
    head: asyncio.Future[Response | Stream] = loop.create_future()
    chunks: asyncio.Queue[Any] = asyncio.Queue()
    room = asyncio.Semaphore(STREAM_WINDOW)
    start: dict[str, Any] = {}
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await loop.create_future()  # nothing more comes: wait until the call ends
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        if message["type"] != "http.response.body":
            return
        data, more = bytes(message.get("body", b"")), bool(message.get("more_body", False))
        headers = [(bytes(k), bytes(v)) for k, v in start.get("headers", [])]
        if not head.done():
            if not more:
                response = Response(data, status_code=int(start.get("status", 200)))
                response.raw_headers = headers
                head.set_result(response)
                return
            head.set_result(Stream(_items(chunks, room, task), ResponseHead(int(start.get("status", 200)), headers)))
        await room.acquire()
        chunks.put_nowait(data)
        if not more:
            chunks.put_nowait(_Ended(None))

    def ended(done: asyncio.Future[None]) -> None:
        error = None if done.cancelled() else done.exception()
        if not head.done():
            head.set_exception(error or ServeError("the ASGI app returned without sending a response"))
        else:
            chunks.put_nowait(_Ended(error))

    task = asyncio.ensure_future(app(scope, receive, send))
    task.add_done_callback(ended)
    try:
        return await head
    except BaseException:
        task.cancel()
        raise


class _Ended:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error


async def _items(chunks: asyncio.Queue[Any], room: asyncio.Semaphore, task: asyncio.Future[None]
                 ) -> AsyncIterator[bytes]:
    finished = False
    try:
        while not isinstance(item := await chunks.get(), _Ended):
            room.release()
            yield item
        finished = True
        if item.error is not None:
            raise item.error
    finally:
        if not finished:  # the caller left: stop the app (a finished one may still run its background tasks)
            task.cancel()
