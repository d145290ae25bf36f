"""The service's code routes of the REST API: upload a pipeline's folder, submit a run of it, deploy it.

What ``airflowless submit`` and ``airflowless deploy`` do, for a client that has
the cluster's token but neither the record nor the storage (a laptop outside
the cluster, a CI job): every route here is an action, so it needs the token
(a submission is code execution). The control plane never imports a user's
module itself: each check runs in a child process
(:mod:`airflowless.service.check`).

=========================================  ====  ===========================================================
route (under ``/airflowless/api/v1``)      verb  what
=========================================  ====  ===========================================================
``pipeline-uploads?module=PATH``           POST  the body is a ``.tar.gz`` of the pipeline's folder (at most
                                                 ``AIRFLOWLESS_SUBMIT_MAX_MB``); stored signed in the storage
                                                 as ``airflowless submit`` stores it; ``{"target",
                                                 "pipeline", "sha256"}``
``pipeline-submissions``                   POST  ``{"target", "params", "priority", "pool"}``: queue one run
                                                 for the service; ``{"run_id"}``
``pipeline-deployments``                   POST  ``{"name", "target", ...}`` with ``deploy``'s options
                                                 (``cron``, ``timezone``, ``every``, ``params``, ...): the
                                                 deployment as stored
=========================================  ====  ===========================================================

A ``target`` is an upload's, or a module on the service's machine
(``/srv/pipelines/taxi.py:taxi``), as ``--no-upload`` takes it.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import tarfile
from typing import Any

from .errors import BadRequest, TooLarge, Unprocessable
from .handler import ApiHandler

__all__ = ["DEPLOY_OPTIONS", "create_deployment", "json_body", "routes", "store_upload", "submit_run"]

# deploy()'s keyword arguments a request may give ("timezone" is its timezone_name)
DEPLOY_OPTIONS = ("params", "cron", "timezone", "every", "catchup", "max_active_runs", "priority", "pool", "paused",
                  "replace", "after", "notify", "on_new_files", "include_existing", "deadline", "only_if",
                  "pass_params", "expect_every", "resume_abandoned")


def store_upload(store: Any, payload: bytes, module: str) -> dict[str, Any]:
    """Keep ``payload`` (a folder as a .tar.gz holding ``module``) signed in the storage; its target."""
    from ..errors import AirflowlessError
    from ..integrity import write_signed
    from ..names import join_under
    from ..service.check import resolve_upload
    from ..service.upload import PREFIX
    from ..settings import get_settings

    names = _members(payload)
    if module not in names:
        shown = sorted(n for n in names if n.endswith(".py"))[:10]
        raise BadRequest(f"the archive holds no {module!r}; its Python files include {shown}")
    digest = hashlib.sha256(payload).hexdigest()
    uri = join_under(get_settings().storage, "submissions", f"{digest}.tar.gz")
    write_signed(uri, payload)
    try:
        pipeline = resolve_upload(f"{PREFIX}{uri}#{module}")
    except AirflowlessError as exc:
        raise Unprocessable(f"the uploaded {module} cannot be loaded: {exc}") from None
    return {"target": f"{PREFIX}{uri}#{module}:{pipeline}", "pipeline": pipeline, "sha256": digest}


def _members(payload: bytes) -> set[str]:
    """The files of a .tar.gz; :class:`BadRequest` if it is not one, or holds what must not be unpacked (absolute
    paths, ``..``, links out of it: the driver unpacks with tarfile's ``data`` filter)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as archive:
            members = archive.getmembers()
            for member in members:
                tarfile.data_filter(member, "/upload")
    except tarfile.FilterError as exc:
        raise BadRequest(f"the archive holds what cannot be unpacked safely: {exc}") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BadRequest(f"the body is a .tar.gz of the pipeline's folder ({exc})") from None
    return {posixpath.normpath(m.name) for m in members if m.isfile()}


def submit_run(store: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Queue one run of ``body["target"]`` for the service, its parameters checked in a child process."""
    from ..errors import AirflowlessError
    from ..service.check import checked_run
    from ..store.service import Trigger

    target, params = _target(body), body.get("params") or {}
    priority, pool = body.get("priority", 0), body.get("pool")
    if not isinstance(params, dict):
        raise BadRequest('"params" is a JSON object of parameter values, e.g. {"params": {"n_rows": 1000}}')
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadRequest(f'"priority" is an integer (higher starts first), got {priority!r}')
    if pool is not None and not isinstance(pool, str):
        raise BadRequest(f'"pool" is a pool\'s name, got {pool!r}')
    try:
        pipeline, checked = checked_run(target, params)
    except AirflowlessError as exc:
        raise Unprocessable(str(exc)) from None
    run_id = store.enqueue_run(pipeline, target=target, params=checked, trigger=Trigger.SUBMIT, priority=priority,
                               pool=pool)
    return {"run_id": run_id, "pipeline": pipeline, "target": target}


def create_deployment(store: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Deploy ``body["target"]`` as ``body["name"]`` with ``deploy``'s options, checked in a child process."""
    from ..errors import AirflowlessError
    from ..service.check import deploy_in_child
    from .reads import plain

    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest('"name" is the deployment\'s name, e.g. {"name": "nightly-taxi", "target": ..., "cron": '
                         '"0 3 * * *"}')
    unknown = sorted(set(body) - {"name", "target", *DEPLOY_OPTIONS})
    if unknown:
        raise BadRequest(f"unknown field(s) {unknown}; a deployment takes {['name', 'target', *DEPLOY_OPTIONS]}")
    options = {("timezone_name" if key == "timezone" else key): body[key] for key in DEPLOY_OPTIONS if key in body}
    url = store.engine.url.render_as_string(hide_password=False)
    try:
        return plain(deploy_in_child(url, _target(body), name, options))  # type: ignore[no-any-return]
    except AirflowlessError as exc:
        raise Unprocessable(str(exc)) from None


def _target(body: dict[str, Any]) -> str:
    target = body.get("target")
    if not isinstance(target, str) or not target:
        raise BadRequest('"target" is what to run: an upload\'s target (POST pipeline-uploads answers it) or a '
                         'module on the service\'s machine, e.g. "/srv/pipelines/taxi.py:taxi"')
    return target


def json_body(handler: ApiHandler) -> dict[str, Any]:
    """A request's body as a JSON object; :class:`BadRequest` or :class:`TooLarge` saying what is wrong."""
    if handler.body_too_large:
        raise TooLarge("the request body is too large")
    try:
        body = json.loads(handler.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        raise BadRequest(f"the body is a JSON object (or empty), got {handler.body[:100]!r}")
    return body


class PipelineUploads(ApiHandler):
    def body_limit(self) -> int:
        from ..settings import get_settings

        return int(get_settings().submit_max_mb * 2**20)

    async def post(self) -> None:
        if self.body_too_large:
            raise TooLarge(f"an upload is at most {self.body_limit() / 2**20:g} MiB (AIRFLOWLESS_SUBMIT_MAX_MB where "
                           "the scheduler runs); leave out what the run does not need (.airflowlessignore)")
        module = posixpath.normpath(self.get_query_argument("module", "") or ".")
        if not module.endswith(".py") or module.startswith(("/", "../")) or module == "..":
            raise BadRequest(f"module= is the pipeline module's path inside the archive, e.g. pipelines/taxi.py; "
                             f"got {self.get_query_argument('module', '')!r}")
        await self.read(store_upload, bytes(self.body), module)


class PipelineSubmissions(ApiHandler):
    async def post(self) -> None:
        await self.read(submit_run, json_body(self))


def routes() -> list[tuple[str, type[ApiHandler]]]:
    return [
        ("pipeline-uploads", PipelineUploads),
        ("pipeline-submissions", PipelineSubmissions),
    ]
