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

import json
from typing import Any

from tornado import web

from . import reads, service_api, submissions
from .context import ControlContext
from .errors import BadRequest, NotFound, TooLarge
from .handler import MAX_BODY, PREFIX, ApiHandler

__all__ = ["PREFIX", "ApiHandler", "routes"]

_MAX_ID = 2**31 - 1  # the store's integer keys
_MAX_TRIALS = 500  # trial= fields in one request (tornado refuses a query of more than 1000 fields outright)


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


class RunLog(ApiHandler):
    private = "logs (what stages and drivers printed, kept readable by the cluster's owner only)"

    async def get(self, run_id: str, node: str | None = None) -> None:
        """``?attempt=N`` (default: the latest), ``?offset=B`` (default 0): a page of the log from byte B."""
        attempt, offset = self.get_query_argument("attempt", None), self.get_query_argument("offset", "0")
        if attempt is not None and not (attempt.isdigit() and len(attempt) <= 6):
            raise BadRequest(f"attempt is a whole number from 1, got {attempt!r}")
        if not (offset.isdigit() and len(offset) <= 18):
            raise BadRequest(f"offset is a byte offset (a whole number from 0), got {offset!r}")
        await self.read(reads.run_log, _id(run_id, "run"), node, attempt=None if attempt is None else int(attempt),
                        offset=int(offset))


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
            trial, _, text = after.partition(":")
            step = _step(text)
            if not (trial.isdigit() and trial.isascii() and len(trial) <= 10 and int(trial) <= _MAX_ID
                    and step is not None):
                raise BadRequest(f"after is the 'next' of the page before, as TRIAL:STEP, got {after[:40]!r}")
            cursor = (int(trial), step)
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
        step = None if after is None else _step(after)
        if after is not None and step is None:
            raise BadRequest(f"after is the 'next' of the page before, a step number, got {after[:40]!r}")
        await self.read(reads.metrics, _id(trial_id, "trial"), names=names, after=step, **self.metric_page())


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
            raise TooLarge(f"a request body is at most {MAX_BODY} bytes of JSON")
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
    table: list[tuple[str, type[ApiHandler]]] = [
        ("runs", Runs),
        ("runs/([^/]+)", Run),
        ("runs/([^/]+)/cancel", CancelRun),
        ("runs/([^/]+)/logs", RunLog),
        ("runs/([^/]+)/logs/(.+)", RunLog),
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
        *submissions.routes(),
        ("openapi.json", OpenApi),
        ("(?:/.*)?", Unknown),
    ]
    return [(f"{PREFIX}/{path}" if not path.startswith("(?:") else PREFIX + path, handler, {"ctx": ctx})
            for path, handler in table]
