"""Which methods of a deployment HTTP may call: ``__call__``, and methods marked with ``@serve.route``.

A deployment's other methods, its own or inherited (a ``torch.nn.Module``
brings ``to``, ``train``, ``load_state_dict`` and some 50 more), are never
HTTP routes; handles may still call any public method by name.

>>> from airflowless import serve
>>> @serve.deployment
... class Model:
...     def __call__(self, body):                 # POST {prefix}
...         return {"y": body["x"]}
...     @serve.route("/explain")                  # POST {prefix}/explain
...     def explain(self, body):
...         return {"why": "because"}
...     def reload(self, path):                   # handles only: handle.reload.remote(path)
...         ...
>>> sorted(http_routes(Model.target))
['', 'explain']
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .ingress import ASGI_METHOD, ingress_app

__all__ = ["HTTPRoute", "route", "http_routes"]

_MARK = "__airflowless_route__"
_PATH = re.compile(r"^(/[A-Za-z0-9._~-]+)+$")


@dataclass(frozen=True)
class HTTPRoute:
    """One HTTP route of a deployment: the method it calls, and whether it takes a Starlette ``Request``."""

    method: str
    takes_request: bool = False


def route(path: Any = None, /) -> Any:
    """Serve a deployment method over HTTP at ``{route_prefix}{path}`` (default ``/`` + the method's name).

    Only ``__call__`` (at the prefix itself) and methods marked so are HTTP
    routes. It goes above or below ``@serve.batch``.

    >>> class Model:
    ...     @route("/v1/predict")
    ...     def predict(self, body):
    ...         return body
    ...     @route
    ...     def explain(self, body):          # at {prefix}/explain
    ...         return body
    """
    def check(where: str, name: str) -> str:
        if not _PATH.match(where):
            raise ConfigError(f"@serve.route needs a path such as '/predict' or '/v1/predict' (letters, digits, "
                              f"'.', '_', '~', '-' between slashes, no trailing '/'), got {where!r}{name}; "
                              "the prefix itself is served by __call__")
        return where

    def mark(fn: Any, where: str | None) -> Any:
        name = getattr(fn, "__name__", "")
        if not callable(fn) or name.startswith("_"):
            raise ConfigError(f"@serve.route goes on a public method, got {name or type(fn).__name__!r}; "
                              "name it without a leading '_' (the prefix itself is served by __call__)")
        setattr(fn, _MARK, check(where if where is not None else f"/{name}", f" on {name!r}"))
        return fn

    if callable(path):
        return mark(path, None)
    if path is not None and not isinstance(path, str):
        raise ConfigError(f"@serve.route takes a path string such as '/predict', got {type(path).__name__}")
    if path is not None:
        check(path, "")
    return lambda fn: mark(fn, path)


def http_routes(target: type | Callable[..., Any]) -> dict[str, HTTPRoute]:
    """The HTTP routes of a deployment's class or function: path under the prefix (no slashes at the ends) -> route.

    ``""`` is ``__call__`` when the class has one; the other entries are the
    methods marked with :func:`route`. A class marked ``@serve.ingress(app)``
    has one route, its app, at ``""``. Two methods on one path raise
    :class:`ConfigError`.
    """
    if not inspect.isclass(target):
        return {"": HTTPRoute("__call__", takes_request(target))}
    if ingress_app(target) is not None:  # its ASGI app routes every path under the prefix
        return {"": HTTPRoute(ASGI_METHOD, takes_request=True)}
    routes: dict[str, HTTPRoute] = {}
    if any("__call__" in vars(base) for base in target.__mro__ if base is not object):
        routes[""] = HTTPRoute("__call__", takes_request(target.__call__))
    seen: set[str] = set()
    for base in target.__mro__:  # the first definition of a name wins, as in attribute lookup
        for name, value in vars(base).items():
            if name in seen:
                continue
            seen.add(name)
            fn = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            where = getattr(fn, _MARK, None) if callable(fn) else None
            if not isinstance(where, str):
                continue
            path = where.strip("/")
            if path in routes:
                raise ConfigError(f"methods {routes[path].method!r} and {name!r} of {target.__name__} are both "
                                  f"routed at {where!r}; give one of them another @serve.route path")
            routes[path] = HTTPRoute(name, takes_request(getattr(target, name)))
    return routes


def takes_request(fn: Any) -> bool:
    """Whether ``fn``'s first argument (after ``self``) is annotated as a Starlette ``Request``."""
    from starlette.requests import Request

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = [p for p in signature.parameters.values() if p.name != "self"]
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        return False
    try:
        annotation = typing.get_type_hints(fn).get(params[0].name)
    except Exception:  # an annotation that does not resolve here: go by its name
        annotation = params[0].annotation
    if isinstance(annotation, str):
        return annotation.rsplit(".", 1)[-1] == "Request"
    return inspect.isclass(annotation) and issubclass(annotation, Request)
