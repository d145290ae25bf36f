"""The HTTP ingress: a Starlette app routing JSON requests to deployments by route prefix.

``POST {prefix}`` calls the ingress deployment's ``__call__(body)``;
``POST {prefix}/name`` calls its public method ``name(body)``; ``GET`` passes
``None``. Bodies are parsed with ``json.loads`` only, never unpickled.
Bad input is a 4xx with a message (400 malformed JSON or a
:class:`BadRequestError` from the deployment, 404 unknown route or method, 413
too large); an overloaded deployment is a 503; an error in the deployment's
code is a 500 naming the exception. ``GET /-/healthz`` and ``GET /-/routes``
report on the proxy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .errors import BackPressureError, BadRequestError, ReplicaDiedError, ServeError

if TYPE_CHECKING:
    from .router import Router

__all__ = ["RouteTarget", "build_app", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class RouteTarget:
    app_name: str
    router: Router
    methods: frozenset[str]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _default(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays, pandas objects
    if callable(tolist):
        return tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def build_app(routes: dict[str, RouteTarget]) -> Starlette:
    """The ASGI app over a live ``routes`` table (prefix -> target), which the runtime edits in place."""

    async def healthz(request: Request) -> Response:
        return Response("success", media_type="text/plain")

    async def list_routes(request: Request) -> Response:
        return _json({prefix: target.app_name for prefix, target in sorted(routes.items())})

    def match(path: str) -> tuple[RouteTarget, str] | None:
        for prefix in sorted(routes, key=len, reverse=True):
            if prefix == "/" or path == prefix or path.startswith(prefix + "/"):
                return routes[prefix], path[len(prefix):].strip("/")
        return None

    async def dispatch(request: Request) -> Response:
        found = match(request.url.path)
        if found is None:
            return _error(404, f"no application serves {request.url.path!r}; routes are {sorted(routes)} "
                               "(see GET /-/routes)")
        target, rest = found
        method = rest or "__call__"
        if method not in target.methods:
            offered = sorted(m for m in target.methods if m != "__call__")
            return _error(404, f"application {target.app_name!r} has no method {rest!r}; it offers POST "
                               f"to its prefix{' and to ' + ', '.join(offered) if offered else ''}")
        body: Any = None
        if request.method != "GET":
            size = request.headers.get("content-length")
            if size is not None and (not size.isdigit() or int(size) > MAX_BODY_BYTES):
                return _error(413, f"the body must be at most {MAX_BODY_BYTES} bytes, got {size}")
            raw = await request.body()
            if len(raw) > MAX_BODY_BYTES:
                return _error(413, f"the body must be at most {MAX_BODY_BYTES} bytes, got {len(raw)}")
            if not raw.strip():
                return _error(400, "expected a JSON body, got an empty one")
            try:
                body = json.loads(raw, parse_constant=_reject_constant)
            except (ValueError, RecursionError) as exc:
                return _error(400, f"the body is not valid JSON ({str(exc)[:200]}); send "
                                   "Content-Type: application/json with a JSON document")
        try:
            result = await target.router.call(method, (body,), {})
        except BadRequestError as exc:
            return _error(400, str(exc))
        except (BackPressureError, ReplicaDiedError) as exc:
            return _error(503, str(exc))
        except ServeError as exc:
            return _error(503, str(exc))
        except Exception as exc:
            return _error(500, f"the deployment raised {type(exc).__name__}: {exc}")
        try:
            return Response(json.dumps(result, default=_default, separators=(",", ":")),
                            media_type="application/json")
        except (TypeError, ValueError) as exc:
            return _error(500, f"the deployment returned a value that is not JSON ({exc})")

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[
        Route("/-/healthz", healthz, methods=["GET"]),
        Route("/-/routes", list_routes, methods=["GET"]),
        Route("/{path:path}", dispatch, methods=methods),
    ])
