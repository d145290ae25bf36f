"""The uvicorn server of the HTTP proxy, with :class:`HTTPOptions`' limits applied.

uvicorn enforces the keep-alive timeout, the size of headers that arrive in
pieces (``h11_max_incomplete_event_size``; the proxy checks the size of the
rest) and the concurrency limit (503) itself.
It has no timeout for a request's headers, so :class:`_HeaderTimeoutProtocol`
adds one: from the moment a connection opens, or its previous response
ends, the next request's headers must be complete within
``header_timeout_s``, else the connection is closed. The body's timeout is
the ASGI app's (:mod:`.proxy`), which reads the body itself.
:func:`run_server` turns uvicorn's ``sys.exit`` on a port it cannot bind into
an ``OSError``. :func:`ingress_ssl_context` picks the proxy's HTTPS, if any.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from .http_options import HTTPOptions

__all__ = ["make_server", "run_server", "ingress_ssl_context"]

logger = logging.getLogger("airflowless.serve.proxy")


class _HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers do not arrive in time."""

    header_timeout_s = 10.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm_header_timer(None)

    def on_response_complete(self) -> None:
        finished = self.cycle  # a pipelined request may start a new cycle inside super()
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer(finished)

    def connection_lost(self, exc: Exception | None) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        super().connection_lost(exc)

    def _arm_header_timer(self, cycle_now: Any) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._on_header_timeout, cycle_now)

    def _on_header_timeout(self, cycle_when_armed: Any) -> None:
        if self.cycle is not cycle_when_armed or self.transport.is_closing():
            return  # a new request arrived meanwhile
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        logger.info("closed the connection of %s: no complete request headers within %g s",
                    client, self.header_timeout_s)
        self.transport.close()


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


def make_server(app: Any, options: HTTPOptions, ssl_context: ssl.SSLContext | None = None) -> Any:
    """A ``uvicorn.Server`` (not started) serving ``app`` with ``options``' address and limits
    (HTTPS with ``ssl_context``)."""
    import uvicorn

    protocol = type("HeaderTimeoutProtocol", (_HeaderTimeoutProtocol,), {"header_timeout_s": options.header_timeout_s})
    config = uvicorn.Config(
        app, host=options.host, port=options.port, loop="none", http=protocol, lifespan="off",
        log_level="warning", log_config=None, access_log=False,
        timeout_keep_alive=options.keep_alive_timeout_s,  # type: ignore[arg-type]
        limit_concurrency=options.limit_concurrency,
        h11_max_incomplete_event_size=options.max_header_bytes,
        ssl_context_factory=None if ssl_context is None else lambda _config, _default: ssl_context,
    )
    return uvicorn.Server(config)


async def run_server(server: Any) -> None:
    """Run ``server`` (from :func:`make_server`) until it stops; ``OSError`` if it cannot listen.

    uvicorn calls ``sys.exit`` when it cannot bind its address, which would end
    the event loop of the thread it runs on; here that is an ``OSError``.
    """
    from .replica import freeze_heap

    freeze_heap()  # a full collection of the driver's heap would stall every request in flight (see .replica)
    try:
        await server.serve()
    except SystemExit:
        raise OSError("uvicorn exited at startup: the address is in use, or not one of this host's "
                      "(logger 'uvicorn.error' says which)") from None


def bound_port(server: Any) -> int:
    """The port a started ``server`` (from :func:`make_server`) listens on (``port=0`` picks one).

    Reads ``uvicorn.Server.servers`` (undocumented; uvicorn has no public way to ask
    the bound address): the asyncio servers it started, whose sockets know it.
    """
    return int(server.servers[0].sockets[0].getsockname()[1])
