"""An HTTP request sent from the proxy to a replica, arriving there as a ``starlette.requests.Request``.

For a deployment method whose first argument is annotated ``Request`` (as in
Ray Serve), the proxy reads the body (bounded, see :mod:`.proxy`) and sends
:class:`RequestData`: the parts of the ASGI scope a handler reads (method,
path, query string, headers, client, server) plus the body. When the replica
unpickles it, it becomes a real Starlette ``Request`` whose ``body()``,
``json()``, ``query_params`` and ``headers`` work as usual. The pickle is the
proxy's own (the wire between airflowless processes); nothing an HTTP client
sends is unpickled.

>>> data = RequestData.of({"type": "http", "method": "POST", "path": "/a", "query_string": b"k=v",
...                        "headers": [(b"x-k", b"1")]}, b'{"x": 1}')
>>> import pickle; request = pickle.loads(pickle.dumps(data))
>>> request.query_params["k"], request.headers["x-k"], request.url.path
('v', '1', '/a')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RequestData"]

_SCOPE_KEYS = ("type", "http_version", "method", "scheme", "path", "raw_path", "root_path", "query_string",
               "headers", "client", "server")


@dataclass(frozen=True)
class RequestData:
    """The picklable part of an HTTP request: scope entries and the whole body."""

    scope: dict[str, Any]
    body: bytes

    @classmethod
    def of(cls, scope: Any, body: bytes) -> RequestData:
        """Keep what a handler reads from an ASGI ``scope``; ``body`` is the request's complete body."""
        kept = {key: scope[key] for key in _SCOPE_KEYS if key in scope}
        kept["headers"] = [(bytes(k), bytes(v)) for k, v in kept.get("headers", [])]
        return cls(kept, body)

    def to_request(self) -> Any:
        """A ``starlette.requests.Request`` over this scope whose body is :attr:`body`."""
        from starlette.requests import Request

        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}

        return Request(dict(self.scope), receive)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any], bytes]]:
        return (_rebuild, (self.scope, self.body))


def _rebuild(scope: dict[str, Any], body: bytes) -> Any:
    return RequestData(scope, body).to_request()
