"""The REST API under ``/airflowless/api/v1``: tornado handlers for reads and actions.

Every answer is JSON; every error is ``{"error": message}`` with its status
(400 bad input, 401/403 token, 404 unknown id, 409 conflict, 503 no store or no
cluster), never a traceback. A read's 200 carries an ``ETag`` (a hash of its
body); the same read with ``If-None-Match`` set to it gets ``304 Not Modified``
and no body while the body would be the same. Only a request past the token
check gets either: a 401/403 has no ``ETag`` and never becomes a 304. Reads run :mod:`.reads` in the context's reader
threads, so the scheduler's event loop never waits on the database; actions call the function
of the same name in :mod:`.actions`. To add a route: a handler here, a row in
:func:`routes`, and its entry in :mod:`.openapi` (a test checks they agree).

>>> from airflowless.control.context import ControlContext
>>> [pattern for pattern, *_ in routes(ControlContext(None))][:2]
['/airflowless/api/v1/runs', '/airflowless/api/v1/runs/([^/]+)']
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
from .errors import ApiError, BadRequest, Busy, NotFound, TooLarge, Unavailable

__all__ = ["PREFIX", "ApiHandler", "routes"]

PREFIX = "/airflowless/api/v1"
_MAX_ID = 2**31 - 1  # the store's integer keys
_MAX_LIMIT = 1000
_MAX_TRIALS = 500  # trial= fields in one request (tornado refuses a query of more than 1000 fields outright)
_MAX_BODY = 64 * 1024  # the largest JSON body an action takes ({"replicas": n} is a few bytes)
_MAX_WAITING_READS = 64  # reads queued for or in the reader threads; more get 503 at once
logger = logging.getLogger(__name__)


@web.stream_request_body
class ApiHandler(web.RequestHandler):
    """Base of every API handler: the token check, JSON answers and JSON errors.

    Bodies are streamed: the token is checked when the headers are in, before
    any of the body is read, and at most ``_MAX_BODY`` bytes of it are kept.
    """

    ctx: ControlContext

    def initialize(self, ctx: ControlContext) -> None:
        self.ctx = ctx
        self.body = b""
        self.body_too_large = False
        self.authorized = False  # set once the token check passed: only then an ETag (and so a 304)
        self.gone = False  # the client closed its connection

    def prepare(self) -> None:
        auth.check(self.ctx, self.request.headers.get("Authorization"), action=self.request.method == "POST",
                   host=self.request.headers.get("Host", ""))
        self.authorized = True
        declared = self.request.headers.get("Content-Length", "0")
        if not declared.isdigit() or int(declared) > _MAX_BODY:
            raise TooLarge(f"a request body is at most {_MAX_BODY} bytes of JSON, got Content-Length {declared[:20]!r}")

    def data_received(self, chunk: bytes) -> None:
        if len(self.body) + len(chunk) > _MAX_BODY:
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
        whose client left while it waited is never made."""
        if self.ctx.waiting_reads >= _MAX_WAITING_READS:
            raise Busy(f"the API is busy with {self.ctx.waiting_reads} reads of the record; "
                              "retry in a second")

        def call() -> str | None:
            from ..errors import StoreError

            if self.gone:
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


def _id(text: str, what: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise BadRequest(f"a {what} id is a whole number, got {text!r}")
    number = int(text)
    if not 1 <= number <= _MAX_ID:
        raise NotFound(f"no {what} with id {number} in this record")
    return number


def _step(text: str) -> int | None:
    """A step number from a query (steps may be negative), or None when the text is not one."""
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isdigit() and digits.isascii() and len(digits) <= 18 else None


class Runs(ApiHandler):
    async def get(self) -> None:
        await self.read(reads.runs, limit=self.query_limit())


class Run(ApiHandler):
    async def get(self, run_id: str) -> None:
        await self.read(reads.run, _id(run_id, "run"))


class CancelRun(ApiHandler):
    async def post(self, run_id: str) -> None:
        await self.act("cancel_run", _id(run_id, "run"))


class Experiments(ApiHandler):
    async def get(self) -> None:
        await self.read(reads.experiments, limit=self.query_limit())


class Experiment(ApiHandler):
    async def get(self, experiment_id: str) -> None:
        await self.read(reads.experiment, _id(experiment_id, "experiment"))


class ExperimentMetrics(ApiHandler):
    async def get(self, experiment_id: str) -> None:
        names = [name for name in self.get_query_arguments("name") if name]
        trials = self.get_query_arguments("trial")
        if len(trials) > _MAX_TRIALS:
            raise BadRequest(f"at most {_MAX_TRIALS} trial ids in one request, got {len(trials)}; "
                             "ask in several requests, or for every trial (no trial= at all)")
        after = self.get_query_argument("after", None)
        cursor = None
        if after is not None:
            trial, _, step = after.partition(":")
            if not (trial.isdigit() and trial.isascii() and _step(step) is not None):
                raise BadRequest(f"after is the 'next' of the page before, as TRIAL:STEP, got {after[:40]!r}")
            cursor = (int(trial), int(step))
        await self.read(reads.experiment_metrics, _id(experiment_id, "experiment"),
                        trial_ids=[_id(text, "trial") for text in trials], names=names, after=cursor,
                        **self.metric_page())


class StopExperiment(ApiHandler):
    async def post(self, experiment_id: str) -> None:
        await self.act("stop_experiment", _id(experiment_id, "experiment"))


class Trial(ApiHandler):
    async def get(self, trial_id: str) -> None:
        await self.read(reads.trial, _id(trial_id, "trial"))


class TrialMetrics(ApiHandler):
    async def get(self, trial_id: str) -> None:
        names = [name for name in self.get_query_arguments("name") if name]
        after = self.get_query_argument("after", None)
        if after is not None and _step(after) is None:
            raise BadRequest(f"after is the 'next' of the page before, a step number, got {after[:40]!r}")
        await self.read(reads.metrics, _id(trial_id, "trial"), names=names,
                        after=None if after is None else int(after), **self.metric_page())


class TrialCheckpoints(ApiHandler):
    async def get(self, trial_id: str) -> None:
        await self.read(reads.checkpoints, _id(trial_id, "trial"))


class StopTrial(ApiHandler):
    async def post(self, trial_id: str) -> None:
        await self.act("stop_trial", _id(trial_id, "trial"))


class Deployments(ApiHandler):
    async def get(self) -> None:
        from ..store.deployments import DeploymentStatus

        status = self.get_query_argument("status", None)
        if status is not None and status not in DeploymentStatus.ALL:
            raise BadRequest(f"status is one of {sorted(DeploymentStatus.ALL)}, got {status!r}")
        await self.read(reads.deployments, limit=self.query_limit(100), status=status)


class ScaleDeployment(ApiHandler):
    async def post(self, app: str, deployment: str) -> None:
        if self.body_too_large:
            raise TooLarge(f"a request body is at most {_MAX_BODY} bytes of JSON")
        try:
            body = json.loads(self.body or b"null")
        except (ValueError, UnicodeDecodeError):
            body = None
        replicas = body.get("replicas") if isinstance(body, dict) else None
        if type(replicas) is not int or replicas < 0:
            raise BadRequest('the body is a JSON object {"replicas": n} with n a whole number >= 0, '
                             f"got {self.body[:100]!r}")
        await self.act("scale_deployment", app, deployment, replicas)


class Live(ApiHandler):
    """What the driver last published to the scheduler: the data executor (``data``) or serve (``serve``)."""

    async def get(self, what: str) -> None:
        if self.ctx.scheduler is None:
            self.reply({"available": False, "reason": "no cluster: this server shows the record only"})
            return
        try:
            from . import live  # type: ignore[attr-defined,unused-ignore]
        except ImportError:
            self.reply({"available": False, "reason": "live views are not available in this version"})
            return
        latest = live.latest_data if what == "data" else live.latest_serve
        self.reply(reads.plain(latest(self.ctx.scheduler)))


class OpenApi(ApiHandler):
    def get(self) -> None:
        from .openapi import document

        # what a scheduler's --dashboard-prefix put before the API (the route matched, so the path ends so)
        self.reply(document(prefix=self.request.path.removesuffix(f"{PREFIX}/openapi.json")))


class Unknown(ApiHandler):
    def prepare(self) -> None:
        super().prepare()
        raise NotFound(f"no API route {self.request.path!r}; the routes are listed at {PREFIX}/openapi.json")


def routes(ctx: ControlContext) -> list[tuple[str, type[web.RequestHandler], dict[str, Any]]]:
    """The API's tornado routes, all bound to ``ctx``."""
    from . import service_api
    table: list[tuple[str, type[ApiHandler]]] = [
        ("runs", Runs),
        ("runs/([^/]+)", Run),
        ("runs/([^/]+)/cancel", CancelRun),
        ("experiments", Experiments),
        ("experiments/([^/]+)", Experiment),
        ("experiments/([^/]+)/metrics", ExperimentMetrics),
        ("experiments/([^/]+)/stop", StopExperiment),
        ("trials/([^/]+)", Trial),
        ("trials/([^/]+)/metrics", TrialMetrics),
        ("trials/([^/]+)/checkpoints", TrialCheckpoints),
        ("trials/([^/]+)/stop", StopTrial),
        ("deployments", Deployments),
        ("deployments/([^/]+)/([^/]+)/scale", ScaleDeployment),
        ("live/(data|serve)", Live),
        *service_api.routes(),
        ("openapi.json", OpenApi),
        ("(?:/.*)?", Unknown),
    ]
    return [(f"{PREFIX}/{path}" if not path.startswith("(?:") else PREFIX + path, handler, {"ctx": ctx})
            for path, handler in table]
