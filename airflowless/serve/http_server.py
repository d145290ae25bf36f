"""The uvicorn server of the HTTP proxy, with :class:`HTTPOptions`' limits applied.

The proxy parses HTTP with httptools (uvicorn's fast parser) when it is
installed (the ``serve`` extra brings it), else with h11. The limits on a
request's headers are one mixin, :class:`_Limits`, under both protocols: a
timeout for the next request's headers (uvicorn has none) and a bound on
headers still incomplete (431); each protocol only says how many bytes of
incomplete headers it holds. uvicorn enforces the keep-alive timeout; the
ASGI app (:mod:`.proxy`) sizes complete headers (431), reads the body within
its size and time bounds (413, 408) and holds the concurrency limit (503) on
requests it works on: uvicorn's own limit counted every open connection, so
slow clients that had not sent their headers took the health checks' places.
:func:`run_server` turns uvicorn's ``sys.exit`` on a port it cannot bind into
an ``OSError``. :func:`ingress_ssl_context` picks the proxy's HTTPS, if any.

Why httptools (and uvloop, :mod:`.driver`): h11 parses in Python, httptools
in C; under W5 (32 connections, one small model) the two together cut the
servers' CPU per request (figures in docs/serve.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigError
from .heap import freeze_heap
from .http_options import HTTPOptions

__all__ = ["DISCONNECT_KEY", "make_server", "run_server", "ingress_ssl_context"]

DISCONNECT_KEY = "airflowless.on_disconnect"
"""The scope key of a list the app may add callbacks to, each called once if the client's connection closes."""

logger = logging.getLogger("airflowless.serve.proxy")

_READ_CHUNK = 256 << 10  # about the most one read of the event loop hands a protocol (asyncio's, uvloop's)


class _Limits:
    """The limits on a request's headers, the same for both protocols; a protocol subclass only parses.

    Mixed into uvicorn's protocols (h11's and httptools'), which both keep the
    request in flight as ``cycle`` and call ``on_response_complete`` when its
    response is sent. Two bounds:

    - time: from the moment a connection opens, or its previous response ends,
      the next request's headers must be complete within ``header_timeout_s``,
      else the connection is closed (uvicorn has no such timeout);
    - size: headers still incomplete past ``max_header_bytes`` get a 431 and
      the connection is closed. Each protocol says how many bytes of
      incomplete headers it holds (:meth:`_incomplete_header_bytes`).

    Keep-alive is uvicorn's; complete headers are sized by the app (:mod:`.proxy`), the body is read and
    bounded there too, and so is the concurrency limit.
    """

    header_timeout_s = 10.0
    max_header_bytes = 16 << 10
    _on_disconnect: list[Callable[[], None]]
    cycle: Any
    transport: Any
    loop: asyncio.AbstractEventLoop
    client: tuple[str, int] | None

    def _incomplete_header_bytes(self) -> int:
        """Bytes received of a request whose headers have not ended (0 while a request is being handled)."""
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        self._check_header_bytes()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():
            self._check_header_bytes()  # a pipelined request parsed just now
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        for gone in list(getattr(self, "_on_disconnect", ())):  # the requests still running end (see .proxy)
            gone()
        super().connection_lost(exc)  # type: ignore[misc]

    def _offer_disconnect_hook(self) -> None:
        """Put this connection's list of disconnect callbacks in the new request's scope (``DISCONNECT_KEY``):
        the app adds one while it waits for the deployment, and no task has to watch ``receive()``."""
        hooks: list[Callable[[], None]] | None = getattr(self, "_on_disconnect", None)
        if hooks is None:
            hooks = []
            self._on_disconnect = hooks
        self.scope[DISCONNECT_KEY] = hooks  # type: ignore[attr-defined]

    def _check_header_bytes(self) -> None:
        if not self.transport.is_closing() and self._incomplete_header_bytes() > self.max_header_bytes:
            body = json.dumps({"error": f"the headers must be at most {self.max_header_bytes} bytes, got more"})
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json"
                                 b"\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                                 % (len(body), body.encode()))
            self.transport.close()

    def _arm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        # the newest request (a pipelined one may have started inside on_response_complete)
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._on_header_timeout, self.cycle)

    def _on_header_timeout(self, cycle_when_armed: Any) -> None:
        idle = cycle_when_armed is None or cycle_when_armed.response_complete
        if self.cycle is not cycle_when_armed or not idle or self.transport.is_closing():
            return  # a request arrived meanwhile, or one is still running (its end re-arms the timer)
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        logger.info("closed the connection of %s: no complete request headers within %g s",
                    client, self.header_timeout_s)
        self.transport.close()


class _OneWritePerTurn:
    """A transport that sends what is written to it in one turn of the event loop with one write.

    uvicorn writes a response's head and its body separately: two ``send``
    calls per request, the most expensive lines of the proxy under W5, and two
    segments for the client to read. Here they leave together on the next turn
    (``call_soon``), or at once before the transport closes. Everything else is
    the wrapped transport's.
    """

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._parts:
            self._loop.call_soon(self._flush)
        self._parts.append(data)

    def _flush(self) -> None:
        parts, self._parts = self._parts, []
        if parts and not self._transport.is_closing():
            self._transport.write(b"".join(parts))

    def get_write_buffer_size(self) -> int:
        return int(self._transport.get_write_buffer_size()) + sum(map(len, self._parts))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._parts.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _OneWritePerResponse:
    """Mixed into uvicorn's protocols: their transport is a :class:`_OneWritePerTurn`."""

    loop: asyncio.AbstractEventLoop

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(_OneWritePerTurn(transport, self.loop))  # type: ignore[misc]


class _H11Protocol(_Limits, _OneWritePerResponse, H11Protocol):
    """uvicorn's h11 protocol (the fallback without httptools) under :class:`_Limits`.

    h11 keeps the bytes it has not parsed; while it waits for a request
    (state IDLE) they are that request's incomplete headers. h11's own bound
    (``h11_max_incomplete_event_size``, a 400) is set above ours, so the
    answer is the same 431 as with httptools.
    """

    def _incomplete_header_bytes(self) -> int:
        import h11

        if self.conn.their_state is not h11.IDLE:
            return 0
        return len(self.conn.trailing_data[0])


def _httptools_protocol() -> type | None:
    """uvicorn's httptools protocol under :class:`_Limits`; None without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None

    class _HttpToolsProtocol(_Limits, _OneWritePerResponse, HttpToolsProtocol):
        """httptools buffers a header until it ends, with no limit of its own and no way to ask its size:
        so every byte that arrives while a request's headers are incomplete is counted."""

        _awaiting_headers = True
        _header_bytes = 0

        def _incomplete_header_bytes(self) -> int:
            return self._header_bytes if self._awaiting_headers else 0

        def data_received(self, data: bytes) -> None:
            if self._awaiting_headers:
                self._header_bytes += len(data)
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._awaiting_headers, self._header_bytes = False, 0
            super().on_headers_complete()
            self._offer_disconnect_hook()  # before the app's task runs: it starts on a later turn

        def on_message_complete(self) -> None:
            self._awaiting_headers = True
            super().on_message_complete()

    return _HttpToolsProtocol


def ingress_ssl_context(options: HTTPOptions, security: Any) -> ssl.SSLContext | None:
    """The proxy's HTTPS: ``options``' own certificate, else the cluster's (mutual TLS), else None (HTTP)."""
    if options.ssl_certfile:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(options.ssl_certfile, options.ssl_keyfile)
            if options.ssl_ca_certs:
                context.load_verify_locations(options.ssl_ca_certs)
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            from ..errors import ConfigError

            raise ConfigError(f"cannot load the proxy's TLS files from http_options ({exc}); expected PEM files "
                              "at ssl_certfile, ssl_keyfile and ssl_ca_certs") from exc
        return context
    from ..runtime.tls import server_context

    return server_context(security, "client")


def make_server(app: Any, options: HTTPOptions, ssl_context: ssl.SSLContext | None = None, *,
                parser: str = "auto") -> Any:
    """A ``uvicorn.Server`` (not started) serving ``app`` with ``options``' address and limits
    (HTTPS with ``ssl_context``); ``parser`` "httptools" or "h11" picks one ("auto": httptools when installed)."""
    import uvicorn

    if parser not in ("auto", "httptools", "h11"):
        raise ConfigError(f"parser must be 'auto', 'httptools' or 'h11', got {parser!r}")
    fast = _httptools_protocol() if parser != "h11" else None
    if parser == "httptools" and fast is None:
        raise ImportError("parser='httptools' needs httptools installed (pip install 'airflowless[serve]')")
    base = fast or _H11Protocol
    protocol = type("ProxyProtocol", (base,), {"header_timeout_s": options.header_timeout_s,
                                               "max_header_bytes": options.max_header_bytes})
    config = uvicorn.Config(
        app, host=options.host, port=options.port, loop="none", http=protocol, lifespan="off",
        log_level="warning", log_config=None, access_log=False,
        timeout_keep_alive=options.keep_alive_timeout_s,  # type: ignore[arg-type]
        limit_concurrency=None,  # the app's (.proxy): requests worked on, not every open connection
        h11_max_incomplete_event_size=options.max_header_bytes + _READ_CHUNK,  # ours (431) comes first
        ssl_context_factory=None if ssl_context is None else lambda _config, _default: ssl_context,
    )
    return uvicorn.Server(config)


async def run_server(server: Any) -> None:
    """Run ``server`` (from :func:`make_server`) until it stops; ``OSError`` if it cannot listen.

    uvicorn calls ``sys.exit`` when it cannot bind its address, which would end
    the event loop of the thread it runs on; here that is an ``OSError``.
    """
    freeze_heap()  # a full collection of the driver's heap would stall every request in flight (see .heap)
    try:
        await server.serve()
    except SystemExit:
        raise OSError("uvicorn exited at startup: the address is in use, or not one of this host's "
                      "(logger 'uvicorn.error' says which)") from None


