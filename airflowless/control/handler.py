"""The base of every REST handler: the token check, JSON answers and errors, reads off the server's loop.

:mod:`.api` and :mod:`.service_api` define the routes on it.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from typing import Any

from tornado import web
from tornado.ioloop import IOLoop

from . import auth, reads
from .context import ControlContext
from .errors import ApiError, BadRequest, Busy, TooLarge, Unavailable

__all__ = ["MAX_BODY", "PREFIX", "ApiHandler"]

PREFIX = "/airflowless/api/v1"
_MAX_LIMIT = 1000
MAX_BODY = 64 * 1024  # the largest JSON body an action takes ({"replicas": n} is a few bytes)
_MAX_WAITING_READS = 64  # reads queued for or in the reader threads; more get 503 at once
logger = logging.getLogger(__name__)


@web.stream_request_body
class ApiHandler(web.RequestHandler):
    """Base of every API handler: the token check, JSON answers and JSON errors.

    Bodies are streamed: the token is checked when the headers are in, before
    any of the body is read, and at most ``MAX_BODY`` bytes of it are kept.
    """

    ctx: ControlContext

    def initialize(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self.body = b""
        self.body_too_large = False
        self.authorized = False  # set once the token check passed: only then an ETag (and so a 304)
        self.gone = False  # the client closed its connection

    private: str | None = None  # what a read of this route shows that needs the token always ("logs")

    def body_limit(self) -> int:
        """The most bytes of a body this route keeps (an upload's route takes more than JSON)."""
        return MAX_BODY

    def prepare(self) -> None:
        auth.check(self.ctx, self.request.headers.get("Authorization"), action=self.request.method == "POST",
                   host=self.request.headers.get("Host", ""), private=self.private)
        self.authorized = True
        declared, limit = self.request.headers.get("Content-Length", "0"), self.body_limit()
        if not declared.isdigit() or int(declared) > limit:
            raise TooLarge(f"a request body here is at most {limit} bytes, got Content-Length {declared[:20]!r}")
        if limit > MAX_BODY:
            self.request.connection.set_max_body_size(limit)  # type: ignore[union-attr]

    def data_received(self, chunk: bytes) -> None:
        if len(self.body) + len(chunk) > self.body_limit():
            self.body_too_large = True  # refused once the request is in; nothing more is kept
            return
        self.body += chunk

    def check_xsrf_cookie(self) -> None:
        """Actions carry a bearer token, which a cross-site form cannot send: no cookie check."""

    def compute_etag(self) -> str | None:
        """tornado's own (a SHA-1 of the body, which ``finish`` sets on a GET's 200 and answers a matching
        ``If-None-Match`` with a 304 from), for a request that passed the token check only."""
        return super().compute_etag() if self.authorized else None

    def reply(self, value: dict[str, Any]) -> None:
        self.reply_text(json.dumps(value, allow_nan=False))

    def reply_text(self, text: str) -> None:
        """Send ``text`` as JSON. ``no-store`` keeps the record out of HTTP caches; a client that keeps the
        last body itself (the pages do) revalidates it with ``If-None-Match`` all the same."""
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(text)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs["exc_info"][1] if "exc_info" in kwargs else None
        if isinstance(exc, ApiError):
            status_code, message = exc.status, exc.message
        elif isinstance(exc, web.HTTPError) and status_code == 405:
            message = (f"{self.request.method} is not how {self.request.path} is called; "
                       f"{PREFIX}/openapi.json lists each route's method")
        elif isinstance(exc, web.HTTPError):
            message = exc.log_message or self._reason
        else:
            message = "internal error; the scheduler's log has the details"
        if status_code == 401:
            self.set_header("WWW-Authenticate", 'Bearer realm="airflowless"')
        if isinstance(exc, Busy):
            self.set_header("Retry-After", str(exc.retry_after_s))
        self.set_status(status_code)
        self.reply({"error": message})

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, ApiError):  # an answer, not a failure of the server
            logger.debug("%s %s: %s %s", self.request.method, self.request.uri, value.status, value.message)
        else:
            super().log_exception(typ, value, tb)

    def on_connection_close(self) -> None:
        self.gone = True  # a read still waiting for a reader thread is skipped

    async def read(self, fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> None:
        """Answer with ``fn(store, *args, **kwargs)``, read and written as JSON in one of the context's
        reader threads: the scheduler's loop only sends the text.

        At most ``_MAX_WAITING_READS`` reads wait for those threads; past that a read is refused at
        once with 503 and ``Retry-After`` (a flood of heavy reads cannot queue up without end). A read
        whose client left while it waited is never made. A POST (an action that writes the record, such
        as a trigger) is neither refused nor dropped so: it is done once accepted."""
        action = self.request.method != "GET"
        if not action and self.ctx.waiting_reads >= _MAX_WAITING_READS:
            raise Busy(f"the API is busy with {self.ctx.waiting_reads} reads of the record; "
                              "retry in a second")

        def call() -> str | None:
            from ..errors import StoreError

            if self.gone and not action:
                return None
            store = self.ctx.store()
            try:
                return json.dumps(fn(store, *args, **kwargs), allow_nan=False)
            except StoreError as exc:
                raise Unavailable(f"the airflowless store cannot be read: {exc}") from exc
            except Exception as exc:
                if type(exc).__module__.startswith("sqlalchemy"):
                    raise Unavailable(f"the airflowless store cannot be read ({type(exc).__name__})") from exc
                raise

        self.ctx.waiting_reads += 1  # on the server's loop only: no lock
        try:
            text = await IOLoop.current().run_in_executor(self.ctx.readers(), call)
        finally:
            self.ctx.waiting_reads -= 1
        if text is not None and not self.gone:
            self.reply_text(text)

    def query_limit(self, default: int = 50, most: int = _MAX_LIMIT) -> int:
        text = self.get_query_argument("limit", str(default))
        if not text.isdigit() or not 1 <= int(text) <= most:
            raise BadRequest(f"limit must be a whole number from 1 to {most}, got {text!r}")
        return int(text)

    def metric_page(self) -> dict[str, Any]:
        """``limit=`` of a metrics read: how many reports one answer carries at most."""
        return {"limit": self.query_limit(reads.METRIC_ROWS, reads.METRIC_ROWS)}

    async def act(self, name: str, *args: Any) -> None:
        """Answer with ``actions.<name>(ctx, *args)`` (awaited if it is a coroutine)."""
        try:
            from . import actions  # type: ignore[attr-defined,unused-ignore]
        except ImportError as exc:
            raise Unavailable("actions are not available in this version of airflowless") from exc
        result = getattr(actions, name)(self.ctx, *args)
        if inspect.isawaitable(result):
            result = await result
        self.reply(reads.plain(result))
