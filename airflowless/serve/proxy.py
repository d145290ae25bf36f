"""The HTTP ingress: a Starlette app routing JSON requests to deployments by route prefix.

``POST {prefix}`` calls the ingress deployment's ``__call__(body)``;
``POST {prefix}{path}`` calls the method marked ``@serve.route(path)``
(:mod:`.routing`); no other method is reachable over HTTP. ``GET`` passes
``None``. A method whose first argument is annotated ``starlette.requests.Request``
gets the request itself instead (:mod:`.http_request`); such a ``__call__``
also gets every path under its prefix that no route claims (as in Ray Serve).
What the method returns is answered as Ray Serve answers it (:func:`_response`):
a Starlette ``Response`` as it is, a generator or ``StreamingResponse`` as a
stream (:mod:`.streaming`), text as text, anything else as JSON. A class
marked ``@serve.ingress(app)`` gets every path under its prefix, which its
ASGI app routes (:mod:`.ingress`).

The body is read here, chunk by chunk, counting bytes: beyond
``max_body_bytes`` the answer is 413 at once, and a body not complete within
``body_timeout_s`` is 408 (both close the connection). It is parsed by
:mod:`.json_body` only, never unpickled. Bad input is a 4xx with a message
(400 malformed, non-finite or over-deep JSON, or a :class:`BadRequestError`
from the deployment; 404 unknown route; 431 headers over ``max_header_bytes``);
an overloaded deployment is a 503; an error in the deployment's code, or a
result that is not JSON, is a 500 naming it; a deployment that has not
answered within ``request_timeout_s`` is a 504; beyond ``limit_concurrency`` requests being worked on at
once a new one is a 503 (connections still sending their headers do not count, and the health checks are never
refused: a crowd of slow clients cannot make the proxy look dead). A client that goes away
mid-request is one log line (logger ``airflowless.serve.proxy``). In both of
those cases the call is cancelled on the replica (:mod:`.replica` says what
that does to a plain ``def`` method that cannot be interrupted). ``GET /-/healthz`` and
``GET /-/routes`` report on the proxy.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import json_body
from .errors import BackPressureError, BadRequestError, ReplicaDiedError, ServeError
from .http_options import HTTPOptions
from .http_request import RequestData
from .http_server import DISCONNECT_KEY
from .ingress import ASGI_METHOD
from .multiplex import MODEL_ID_HEADER
from .request_ends import RequestEnds
from .routing import HTTPRoute
from .streaming import http_response
from .wire import RemoteStream

if TYPE_CHECKING:
    from .router import Router

__all__ = ["RouteTarget", "build_app"]

logger = logging.getLogger("airflowless.serve.proxy")


@dataclass(frozen=True)
class RouteTarget:
    """An application served at a prefix: its ingress's router and HTTP routes (path under the prefix -> route)."""

    app_name: str
    router: Router
    routes: dict[str, HTTPRoute]


class _Refused(Exception):
    """The body cannot be read: a status and a message, or ``status=0`` when the client went away."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _json(payload: Any, status: int = 200, *, close: bool = False) -> Response:
    headers = {"connection": "close"} if close else None
    return Response(json_body.dump(payload), status_code=status, media_type="application/json", headers=headers)


def _response(result: Any) -> Response:
    """The HTTP answer for what a deployment returned, as Ray Serve gives it.

    A Starlette ``Response`` goes out as it is (status, headers, cookies); a
    stream as it comes (:mod:`.streaming`); text as ``text/plain``; bytes as ``application/octet-stream``; anything else as
    JSON (numpy and pandas values through ``tolist``).
    """
    if isinstance(result, Response):
        return result
    if isinstance(result, RemoteStream):
        return http_response(result)
    if isinstance(result, str):
        return Response(result, media_type="text/plain")
    if isinstance(result, bytes | bytearray | memoryview):
        return Response(bytes(result), media_type="application/octet-stream")
    return _json(result)


def _error(status: int, message: str, *, close: bool = False) -> Response:
    return _json({"error": message}, status, close=close)


class _ClientLeft(Exception):
    """The client closed its connection while its request ran."""


class _TimedOut(Exception):
    """The deployment did not answer within ``request_timeout_s``."""


async def _disconnected(request: Request) -> None:
    """Return once the client has closed the connection (the body is read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _call(request: Request, target: RouteTarget, route: HTTPRoute, argument: Any,
                ends: RequestEnds) -> Any:
    """The deployment's answer; cancelled (on the replica too) when the client leaves or time is up.

    The request's task is registered with ``ends``, which cancels it past its
    deadline; the client's disconnect cancels it the same way. Our HTTP
    protocol (:mod:`.http_server`) calls back on disconnect, which costs a list
    append per request; under another server a task watches ``receive()``.
    """
    watched = ends.watch()
    hooks = request.scope.get(DISCONNECT_KEY)
    watcher = None
    if hooks is not None:
        hooks.append(watched.end)
    else:
        watcher = asyncio.ensure_future(_disconnected(request))
        watcher.add_done_callback(lambda done: None if done.cancelled() else watched.end())
    try:
        return await target.router.call(route.method, (argument,), {}, model_id=_model_id(request.scope))
    except asyncio.CancelledError:
        if watched.why is None:
            raise  # cancelled from outside: the server is closing
        watched.task.uncancel()
        raise _ClientLeft() if watched.why == "left" else _TimedOut() from None
    finally:
        ends.forget(watched)
        if hooks is not None:
            hooks.remove(watched.end)
        elif watcher is not None:
            watcher.cancel()


_MODEL_ID_HEADER = MODEL_ID_HEADER.encode()


def _model_id(scope: Any) -> str:
    """The multiplexed model the request names (its ``serve_multiplexed_model_id`` header), or ""."""
    for name, value in scope["headers"]:
        if name == _MODEL_ID_HEADER:  # ASGI servers give header names in lower case
            return bytes(value).decode("latin-1")
    return ""


def _client(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "a client"


async def _read_body(request: Request, options: HTTPOptions) -> bytes:
    """The request's body, read chunk by chunk within ``max_body_bytes`` and ``body_timeout_s``."""
    limit = options.max_body_bytes
    size = request.headers.get("content-length")
    if size is not None and (not size.isdigit() or int(size) > limit):
        raise _Refused(413, f"the body must be at most {limit} bytes, got Content-Length {size[:40]}")
    body = bytearray()
    try:
        async with asyncio.timeout(options.body_timeout_s):  # one timer per body, no task per chunk (wait_for's)
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    raise _Refused(0, f"disconnected after sending {len(body)} bytes of the body")
                body += message.get("body", b"")
                if len(body) > limit:
                    raise _Refused(413, f"the body must be at most {limit} bytes, got more")
                if not message.get("more_body", False):
                    return bytes(body)
    except TimeoutError:
        raise _Refused(408, f"the body did not arrive within {options.body_timeout_s:g} s "
                            f"({len(body)} bytes came); send it faster") from None


async def _argument(request: Request, route: HTTPRoute, options: HTTPOptions, prefix: str) -> Any:
    """What the deployment's method gets: the request, or the parsed JSON body (``None`` for ``GET``)."""
    if route.method == ASGI_METHOD:  # an ingress app routes under its prefix, as if mounted there
        scope = {**request.scope, "root_path": "" if prefix == "/" else prefix}
        if scope["path"] == prefix:  # the prefix itself is the app's "/"
            scope["path"] = f"{prefix.rstrip('/')}/"
            scope["raw_path"] = scope["path"].encode()
        return RequestData.of(scope, await _read_body(request, options))
    if route.takes_request:
        return RequestData.of(request.scope, await _read_body(request, options))
    if request.method == "GET":
        return None
    raw = await _read_body(request, options)
    if not raw.strip():
        raise _Refused(400, "expected a JSON body, got an empty one")
    try:
        return json_body.parse(raw)
    except ValueError as exc:
        raise _Refused(400, f"the body is not valid JSON ({str(exc)[:200]}); send Content-Type: "
                            "application/json with a JSON document") from None


def build_app(routes: dict[str, RouteTarget], options: HTTPOptions | None = None) -> Starlette:
    """The ASGI app over a live ``routes`` table (prefix -> target), which the runtime edits in place."""
    options = options or HTTPOptions()
    ends = RequestEnds(options.request_timeout_s)
    working = 0  # requests dispatch is handling now (the concurrency limit's count)

    async def healthz(request: Request) -> Response:
        return Response("success", media_type="text/plain")

    async def list_routes(request: Request) -> Response:
        return _json({prefix: target.app_name for prefix, target in sorted(routes.items())})

    def match(path: str) -> tuple[str, str] | None:
        """The route prefix serving ``path``, and the rest of the path."""
        for prefix in sorted(routes, key=len, reverse=True):
            if prefix == "/" or path == prefix or path.startswith(prefix + "/"):
                return prefix, path[len(prefix):].strip("/")
        return None

    async def dispatch(request: Request) -> Response:
        nonlocal working
        if working >= options.limit_concurrency:
            return _error(503, f"the proxy is working on {working} requests, its limit (http_options "
                               "limit_concurrency); try again shortly")
        working += 1
        try:
            return await handle(request)
        finally:
            working -= 1

    async def handle(request: Request) -> Response:
        header_bytes = sum(len(name) + len(value) + 4 for name, value in request.scope["headers"])
        if header_bytes > options.max_header_bytes:  # the protocol bounds only headers that arrive in pieces
            return _error(431, f"the headers must be at most {options.max_header_bytes} bytes, got {header_bytes}",
                          close=True)
        path = request.scope["path"]  # not request.url: building a URL object costs more than the rest of routing
        found = match(path)
        if found is None:
            return _error(404, f"no application serves {path!r}; routes are {sorted(routes)} (see GET /-/routes)")
        prefix, rest = found
        target = routes[prefix]
        route = target.routes.get(rest)
        if route is None and "" in target.routes and target.routes[""].takes_request:
            route = target.routes[""]  # a __call__ that reads the request serves every path under its prefix (Ray)
        if route is None:
            offered = sorted("/" + path for path in target.routes if path)
            return _error(404, f"application {target.app_name!r} has no HTTP route {'/' + rest!r}; it serves its "
                               f"prefix{' and ' + ', '.join(offered) if offered else ''} (mark a method with "
                               "@serve.route to serve it)")
        try:
            argument = await _argument(request, route, options, prefix)
        except _Refused as refused:
            if refused.status == 0:
                logger.info("%s %s from %s: %s", request.method, path, _client(request), refused)
                return Response(status_code=499)  # nobody reads it: the client is gone
            return _error(refused.status, str(refused), close=refused.status in (408, 413, 431))
        try:
            result = await _call(request, target, route, argument, ends)
        except _ClientLeft:
            logger.info("%s %s from %s: the client left before the answer; the call was cancelled",
                        request.method, path, _client(request))
            return Response(status_code=499)
        except _TimedOut:
            return _error(504, f"application {target.app_name!r} did not answer within "
                               f"{options.request_timeout_s:g} s (http_options request_timeout_s); the call "
                               "was cancelled")
        except BadRequestError as exc:
            return _error(400, str(exc))
        except (BackPressureError, ReplicaDiedError, ServeError) as exc:
            return _error(503, str(exc))
        except Exception as exc:
            return _error(500, f"the deployment raised {type(exc).__name__}: {exc}")
        try:
            return _response(result)
        except (TypeError, ValueError) as exc:
            return _error(500, f"the deployment returned a value that is not JSON ({exc})")

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[
        Route("/-/healthz", healthz, methods=["GET"]),
        Route("/-/routes", list_routes, methods=["GET"]),
        Route("/{path:path}", dispatch, methods=methods),
    ])
