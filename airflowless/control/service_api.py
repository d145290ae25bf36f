"""The service's routes of the REST API: pipeline deployments, their actions, the queue.

These read and write the record only (the service, wherever it runs, acts on
it within a tick), so they work on a scheduler's dashboard and under
``airflowless ui`` alike. Actions need the cluster's token, as every POST does.
A trigger's parameters are checked against the pipeline in a child process
(:mod:`airflowless.service.check`): a bad one is a 422 that names it.

================================================  ====  =================================================
route (under ``/airflowless/api/v1``)             verb  what
================================================  ====  =================================================
``pipeline-deployments``                          GET   every deployment: schedule, next due, paused,
                                                        broken, its last runs
``pipeline-deployments``                          POST  deploy a pipeline (:mod:`.submissions`)
``pipeline-deployments/{name}``                   GET   one deployment
``pipeline-deployments/{name}/parameters``        GET   the pipeline's typed parameters, each with the
                                                        value a trigger runs with (the Trigger form)
``pipeline-deployments/{name}/trigger``           POST  queue one run now; ``{"params": {...}}`` optional
``pipeline-deployments/{name}/pause``, ``unpause``  POST  stop or resume its schedule
``pipeline-deployments/{name}/backfill``          POST  ``{"start", "end", "max_active_runs", "rerun"}``
``queue``                                         GET   the queued runs in start order, why each waits,
                                                        the pools
``models``                                        GET   registered models (:mod:`airflowless.models`)
``models/{name}``                                 GET   one model's versions, newest first
================================================  ====  =================================================
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from .errors import BadRequest, Busy, NotFound, Unprocessable
from .handler import ApiHandler

__all__ = ["routes", "deployments", "deployment", "parameters", "queue"]


def deployments(store: Any) -> dict[str, Any]:
    from .reads import plain

    rows = store.list_pipeline_deployments()
    for row in rows:
        if row.get("on_files"):  # what its file trigger last took
            row["files_seen"] = store.trigger_history(row["name"], limit=1)
    return {"deployments": plain(rows)}


def deployment(store: Any, name: str) -> dict[str, Any]:
    from .reads import plain

    try:
        row = store.get_pipeline_deployment(name)
    except KeyError as exc:
        raise NotFound(exc.args[0]) from None
    if row.get("on_files"):
        row["files_seen"] = store.trigger_history(name, limit=20)
    row["alerts"] = store.deployment_alerts(row["id"])
    return plain(row)  # type: ignore[no-any-return]


_describing = threading.BoundedSemaphore(1)  # the reader threads are few: one may wait on a module's import


def parameters(store: Any, name: str) -> dict[str, Any]:
    """Deployment ``name``'s pipeline parameters as its module declares them now (read in a child process),
    each with the ``value`` a trigger runs with: the deployment's (``deployed``) or the default."""
    from ..errors import AirflowlessError
    from ..service.check import describe_params
    from .reads import plain

    if not _describing.acquire(blocking=False):
        raise Busy("the pipelines' parameters are being read for other requests (each in a process of its own); "
                   "retry in a few seconds")
    try:
        found = store.get_pipeline_deployment(name)
        declared = describe_params(found["target"])
    except KeyError as exc:
        raise NotFound(exc.args[0]) from None
    except AirflowlessError as exc:
        raise Unprocessable(f"cannot read the parameters of deployment {name!r}: {exc}") from None
    finally:
        _describing.release()
    deployed = plain(found["params"])
    for param in declared:
        param["deployed"] = param["name"] in deployed
        param["value"] = deployed[param["name"]] if param["deployed"] else param["default"]
    return {"deployment": name, "pipeline": found["pipeline"], "parameters": declared}


def queue(store: Any) -> dict[str, Any]:
    from .reads import plain, run_summary

    return {"runs": [run_summary(r) for r in store.queued_runs()], "pools": plain(store.list_pools())}


def _act(store: Any, name: str, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    from ..errors import AirflowlessError
    from ..service import deploy as service

    try:
        found = store.get_pipeline_deployment(name)
        if verb == "trigger":
            params = body.get("params") or {}
            if not isinstance(params, dict):
                raise BadRequest('"params" is a JSON object of parameter values, e.g. {"params": {"n_rows": 1000}}')
            if params:  # text for a typed parameter (the page's form) is parsed as --param would parse it
                from ..service.check import check_params

                params = check_params(found["target"], {**found["params"], **params}, texts=True)
            return {"deployment": name, "action": verb, "run_id": service.trigger(name, params=params, store=store,
                                                                                   checked=True)}
        if verb in ("pause", "unpause"):
            store.set_deployment_paused(name, verb == "pause")
            return {"deployment": name, "action": verb, "paused": verb == "pause"}
        start, end = _moment(body, "start"), _moment(body, "end")
        limit = body.get("max_active_runs")
        backfill_id, runs = service.backfill(name, start, end, max_active_runs=limit,
                                             rerun=bool(body.get("rerun", False)), store=store)
        return {"deployment": name, "action": verb, "backfill_id": backfill_id, "run_ids": runs}
    except KeyError as exc:
        raise NotFound(exc.args[0]) from None
    except AirflowlessError as exc:
        raise Unprocessable(str(exc)) from None


def _moment(body: dict[str, Any], key: str) -> datetime:
    value = body.get(key)
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise BadRequest(f'"{key}" is an ISO 8601 time such as "2026-11-01T00:00:00Z", got {value!r}') from None


class PipelineDeployments(ApiHandler):
    async def get(self) -> None:
        await self.read(deployments)

    async def post(self) -> None:
        from .submissions import create_deployment, json_body

        await self.read(create_deployment, json_body(self))


class PipelineDeployment(ApiHandler):
    async def get(self, name: str) -> None:
        await self.read(deployment, name)


class PipelineDeploymentParameters(ApiHandler):
    private = "a pipeline's parameters (it imports the pipeline's module in a process of its own)"

    async def get(self, name: str) -> None:
        await self.read(parameters, name)


class PipelineDeploymentAction(ApiHandler):
    async def post(self, name: str, verb: str) -> None:
        from .submissions import json_body

        await self.read(_act, name, verb, json_body(self))


def registered_models(store: Any) -> dict[str, Any]:
    from .reads import plain

    return {"models": plain(store.list_models())}


def registered_model(store: Any, name: str) -> dict[str, Any]:
    from .reads import plain

    try:
        versions = store.model_versions(name)
    except KeyError as exc:
        raise NotFound(exc.args[0]) from None
    served = store.model_servers(name)
    for version in versions:
        version["served_by"] = [{"app": row["app"], "deployment": row["deployment"], "hostname": row["hostname"],
                                 "pid": row["pid"]} for row in served.get(version["version"], [])]
    return {"name": name, "versions": plain(versions)}


class Models(ApiHandler):
    async def get(self) -> None:
        await self.read(registered_models)


class Model(ApiHandler):
    async def get(self, name: str) -> None:
        await self.read(registered_model, name)


class Queue(ApiHandler):
    async def get(self) -> None:
        await self.read(queue)


def routes() -> list[tuple[str, type[ApiHandler]]]:
    return [
        ("pipeline-deployments", PipelineDeployments),
        ("pipeline-deployments/([^/]+)", PipelineDeployment),
        ("pipeline-deployments/([^/]+)/parameters", PipelineDeploymentParameters),
        ("pipeline-deployments/([^/]+)/(trigger|pause|unpause|backfill)", PipelineDeploymentAction),
        ("queue", Queue),
        ("models", Models),
        ("models/([^/]+)", Model),
    ]
