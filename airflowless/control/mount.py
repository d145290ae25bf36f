"""Putting the control plane on an HTTP server: a Dask scheduler's, or one of its own.

:func:`install` adds every route of :func:`routes` (the API, and the pages when
:mod:`.pages` is there) to a scheduler's dashboard server and registers the
Prometheus collector of :mod:`.metrics` when it is there. ``airflowless.init()``
calls it for the embedded cluster, ``dask scheduler --preload
airflowless.dashboard`` for a scheduler a user runs. :func:`serve_standalone` is
``airflowless ui``: the same routes on a server of their own, no cluster (HTTPS
when given an SSL context).

>>> from airflowless.control.context import ControlContext
>>> paths = [pattern for pattern, *_ in routes(ControlContext(None))]
>>> "/airflowless/api/v1/runs" in paths
True
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import ssl
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from .context import ControlContext

__all__ = ["install", "installed", "limit_header_wait", "link", "routes", "serve_standalone", "start_server"]

logger = logging.getLogger(__name__)
_installed: weakref.WeakKeyDictionary[Any, ControlContext] = weakref.WeakKeyDictionary()


def _present(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def routes(ctx: ControlContext, prefix: str = "") -> list[Any]:
    """Every control-plane route bound to ``ctx``: the API, then the pages (when present); under
    ``prefix`` (a scheduler's ``--dashboard-prefix``, e.g. ``"/dask"``) when given."""
    from . import api

    table = list(api.routes(ctx))
    if _present("airflowless.control.pages"):
        from . import pages  # type: ignore[attr-defined,unused-ignore]

        table = pages.routes(ctx) + table
    return [(prefix + pattern, *rest) for pattern, *rest in table]


def _http_prefix(application: Any) -> str:
    """The ``--dashboard-prefix`` (``http_prefix``) the scheduler's dashboard was started with, ``""`` for
    none. The scheduler keeps no attribute of it, so it is read off distributed's own ``health`` route."""
    for rule in getattr(getattr(application, "wildcard_router", None), "rules", []):
        pattern = getattr(getattr(rule.matcher, "regex", None), "pattern", "")
        if pattern.endswith("/health$"):
            return pattern[: -len("/health$")]
    return ""


def install(scheduler: Any, *, store_url: str | None = None, token: str | None = None,
            follow_settings: bool = False) -> ControlContext | None:
    """Add the control plane to ``scheduler``'s dashboard server; return its context (None: no dashboard).

    ``store_url`` defaults to ``AIRFLOWLESS_DB`` (or the SQLite file under
    ``AIRFLOWLESS_HOME``); ``token`` to ``AIRFLOWLESS_TOKEN``, or a new one kept in
    ``$AIRFLOWLESS_HOME/tokens/<host>-<dashboard port>`` (mode 0600) and removed
    when the scheduler closes. Installing twice returns the first context.
    """
    if scheduler in _installed:
        return _installed[scheduler]
    application = getattr(scheduler, "http_application", None)
    if application is None:
        return None
    from ..settings import get_settings
    from . import auth

    settings = get_settings()
    bound = _bound(scheduler.http_server)
    ctx = ControlContext(store_url or settings.db_url, scheduler=scheduler, follow_settings=follow_settings,
                         loopback=all(auth.is_loopback(host) for host, _ in bound))
    ctx.token = token or settings.token
    ctx.token_hint = "AIRFLOWLESS_TOKEN"
    if ctx.token is None:
        ctx.token = auth.generate_token()
        written = auth.write_token(ctx.token, settings.home, bound[0][1])
        ctx.token_hint = str(written)
        scheduler.add_plugin(_ForgetToken(written))
    application.add_handlers(r".*$", routes(ctx, _http_prefix(application)))
    _guard_metrics(application, ctx)
    limit_header_wait(scheduler.http_server)
    if _present("airflowless.control.pages"):
        from . import pages  # type: ignore[attr-defined,unused-ignore]

        pages.link_from_dashboard(scheduler)  # the "airflowless" entry in the dashboard's navigation
    _installed[scheduler] = ctx
    if _present("airflowless.control.metrics"):
        try:
            from . import metrics  # type: ignore[attr-defined,unused-ignore]

            metrics.register(ctx)
        except ImportError as exc:  # prometheus-client missing: pages and API still serve
            logger.warning("airflowless: no airflowless_* metrics on /metrics (%s); pip install prometheus-client",
                           exc)
    return ctx


HEADER_TIMEOUT_S = 10.0


def limit_header_wait(server: Any, seconds: float = HEADER_TIMEOUT_S) -> None:
    """Close a connection to ``server`` (tornado's) that has not sent a whole request's headers within
    ``seconds``, or sat idle that long between requests. Tornado's default is an hour: a thousand connections
    holding half a request were kept, each a file descriptor. A WebSocket (Bokeh's plots) is not affected
    once upgraded. Applies to connections accepted from now on."""
    params = getattr(server, "conn_params", None)
    if params is not None:
        params.header_timeout = min(params.header_timeout or seconds, seconds)


def _guard_metrics(application: Any, ctx: ControlContext) -> None:
    """Make distributed's ``/metrics`` ask what the API asks of a read (:func:`.auth.check`): the token when the
    server listens beyond loopback, or when the request's ``Host`` does not name this machine (DNS rebinding).

    Its handler is distributed's; the route's target is swapped for a subclass that checks first.
    """
    from . import auth
    from .errors import ApiError

    for rule in getattr(getattr(application, "wildcard_router", None), "rules", []):
        pattern = getattr(getattr(rule.matcher, "regex", None), "pattern", "")
        target = rule.target
        if not pattern.endswith("/metrics$") or not isinstance(target, type) or getattr(target, "_guarded", False):
            continue

        class Guarded(target):  # type: ignore[misc,valid-type]
            _guarded = True

            def prepare(self) -> Any:
                try:
                    auth.check(ctx, self.request.headers.get("Authorization"), action=False,
                               host=self.request.headers.get("Host", ""))
                except ApiError as refused:
                    self.set_status(refused.status)
                    self.set_header("Content-Type", "text/plain; charset=utf-8")
                    if refused.status == 401:
                        self.set_header("WWW-Authenticate", 'Bearer realm="airflowless"')
                    self.finish(f"{refused.message}\n")
                    return None
                return super().prepare()

        rule.target = Guarded


class _ForgetToken(SchedulerPlugin):
    """Removes the token file it names when the scheduler closes (tokens of past clusters piled up)."""

    name = "airflowless-token"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def close(self) -> None:
        self.path.unlink(missing_ok=True)


def installed(scheduler: Any) -> ControlContext | None:
    """The context :func:`install` put on ``scheduler``, or None."""
    return _installed.get(scheduler)


def _bound(server: Any) -> list[tuple[str, int]]:
    from distributed.comm import get_tcp_server_addresses

    return [(str(address[0]), int(address[1])) for address in get_tcp_server_addresses(server)]


def link(scheduler: Any) -> str:
    """The address of the control plane's pages on ``scheduler``'s dashboard server."""
    host, port = _bound(scheduler.http_server)[0]
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    scheme = "https" if getattr(scheduler.http_server, "ssl_options", None) else "http"
    return f"{scheme}://{_url_host(host)}:{port}{_http_prefix(scheduler.http_application)}/airflowless/"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def start_server(ctx: ControlContext, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None) -> tuple[Any, int]:
    """A tornado server of the control plane listening on ``host:port`` (0: a free port), in the running loop.

    Returns the server and the port it got. ``/`` leads to the pages (or to the
    API's document when there are none). With ``ssl_context`` it speaks HTTPS
    only (:func:`airflowless.runtime.tls.https_context`): a plain HTTP request
    fails the handshake and is closed.
    """
    from tornado import web
    from tornado.httpserver import HTTPServer

    from . import auth

    ctx.loopback = auth.is_loopback(host)
    home = "/airflowless/" if _present("airflowless.control.pages") else "/airflowless/api/v1/openapi.json"
    application = web.Application([(r"/", web.RedirectHandler, {"url": home}), *routes(ctx)])
    server = HTTPServer(application, ssl_options=ssl_context)
    limit_header_wait(server)
    server.listen(port, address=host.strip("[]"))
    return server, _bound(server)[0][1]


def serve_standalone(ctx: ControlContext, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                     ready: Callable[[str], None] | None = None) -> None:
    """Serve the control plane of ``ctx`` on ``host:port`` (HTTPS with ``ssl_context``) until interrupted;
    ``ready(url)`` once listening."""

    async def main() -> None:
        server, bound = start_server(ctx, host, port, ssl_context)
        if ready is not None:
            ready(f"{'https' if ssl_context is not None else 'http'}://{_url_host(host)}:{bound}/")
        try:
            await asyncio.Event().wait()
        finally:
            server.stop()

    try:
        asyncio.run(main())
    finally:
        ctx.close()

