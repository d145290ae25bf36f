"""The OpenAPI 3 document of the API, served at ``/airflowless/api/v1/openapi.json``.

Written as data, one entry per route of :func:`.api.routes`; a test checks that
every path here answers and every route is here. Under a scheduler's
``--dashboard-prefix`` (``/dask``) the paths stay as they are and the prefix is
the document's ``servers`` entry (``[{"url": "/dask"}]``): OpenAPI clients put
a server's path before every path, resolved against where the document was read.

>>> sorted(document()["paths"])[:2]
['/airflowless/api/v1/deployments', '/airflowless/api/v1/deployments/{app}/{deployment}/scale']
"""

from __future__ import annotations

from typing import Any

__all__ = ["document"]

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_OBJECT = {"type": "object", "additionalProperties": True}


def _id(name: str, what: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": f"the {what}'s id",
            "schema": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}}


def _text(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": {"type": "string", "minLength": 1}}


def _names() -> dict[str, Any]:
    return {"name": "name", "in": "query", "required": False, "explode": True,
            "description": "only these metrics (repeat: ?name=a&name=b; the server takes 1000 query fields at most)",
            "schema": {"type": "array", "maxItems": 100, "items": {"type": "string"}}}


def _pages(after: str) -> list[dict[str, Any]]:
    return [{"name": "after", "in": "query", "required": False,
             "description": f"where this page starts: the 'next' of the page before ({after}); "
                            "the answer's 'next' is null on the last page",
             "schema": {"type": "string", "maxLength": 40}},
            {"name": "limit", "in": "query", "required": False, "description": "reports on one page at most",
             "schema": {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 10_000}}]


def _log_page() -> list[dict[str, Any]]:
    return [{"name": "attempt", "in": "query", "required": False, "description": "which attempt (default: the latest)",
             "schema": {"type": "integer", "minimum": 1}},
            {"name": "offset", "in": "query", "required": False,
             "description": "the byte to start at: the 'next_offset' of the page before",
             "schema": {"type": "integer", "minimum": 0, "default": 0}}]


def _limit(default: int) -> dict[str, Any]:
    return {"name": "limit", "in": "query", "required": False, "description": "how many, newest first",
            "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": default}}


def _answers(summary: str, *, found: bool = False, action: bool = False,
             statuses: tuple[int, ...] = ()) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "OK", "content": {"application/json": {"schema": _OBJECT}}}}
    errors = {400: "bad input", 401: "no bearer token where one is needed",
              403: "a bearer token that is not this cluster's", 503: "no store, or no cluster for an action"}
    if found:
        errors[404] = "no such id in the record"
    if action:
        errors[404] = "no such id in the record or on the cluster"
        errors[409] = "the target is not in a state that allows this"
    for status in statuses:
        errors.setdefault(status, "see the error message")
    for status, description in sorted(errors.items()):
        responses[str(status)] = {"description": description,
                                  "content": {"application/json": {"schema": _ERROR}}}
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if action:
        operation["security"] = [{"bearer": []}]
    return operation


_ETAG = {"description": "a hash of the body: send it back as If-None-Match to get a 304 while it is the same",
         "schema": {"type": "string"}}
_IF_NONE_MATCH = {"name": "If-None-Match", "in": "header", "required": False,
                  "description": "the ETag of a body the client has: 304 and no body while the answer is the same",
                  "schema": {"type": "string"}}


def _read(summary: str, *parameters: dict[str, Any], found: bool = False) -> dict[str, Any]:
    operation = _answers(summary, found=found)
    operation["responses"]["200"]["headers"] = {"ETag": _ETAG}
    operation["responses"]["304"] = {"description": "Not Modified: the body would be the one of the ETag given "
                                                    "in If-None-Match (no body)",
                                     "headers": {"ETag": _ETAG}}
    return {"get": {**operation, "parameters": [*parameters, _IF_NONE_MATCH]}}


def _action(summary: str, *parameters: dict[str, Any], body: dict[str, Any] | None = None) -> dict[str, Any]:
    operation = {**_answers(summary, action=True), "parameters": list(parameters)}
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return {"post": operation}


def _service_action(summary: str, body: dict[str, Any] | None) -> dict[str, Any]:
    item = _action(summary, _text("name", "the deployment's name"), body=body)
    item["post"]["responses"]["422"] = {"description": "not what the deployment takes (a parameter, a range)",
                                        "content": {"application/json": {"schema": _ERROR}}}
    if body is not None:
        item["post"]["requestBody"]["required"] = False
    return item


def _code_action(summary: str, body: dict[str, Any] | None, *parameters: dict[str, Any],
                 media: str = "application/json") -> dict[str, Any]:
    """An action that takes code to run (an upload, a submission, a deployment): 413 past the bound, 422 for a
    module that does not load or parameters it does not take."""
    item = _action(summary, *parameters, body=body)
    if body is None:
        item["post"]["requestBody"] = {"required": True, "content": {media: {"schema": {"type": "string",
                                                                                        "format": "binary"}}}}
    for status, why in (("413", "over the upload bound"), ("422", "the module does not load, or takes other "
                                                                   "parameters")):
        item["post"]["responses"][status] = {"description": why, "content": {"application/json": {"schema": _ERROR}}}
    return item


def document(prefix: str = "") -> dict[str, Any]:
    """The OpenAPI 3.0 document (a new dict each call); ``prefix``: the path the API is mounted under.

    >>> document("/dask")["servers"][0]["url"]
    '/dask'
    """
    served = prefix.rstrip("/")
    run, experiment, trial = _id("run_id", "run"), _id("experiment_id", "experiment"), _id("trial_id", "trial")
    api = "/airflowless/api/v1"
    paths = {
        "/runs": _read("The latest pipeline runs, newest first", _limit(50)),
        "/runs/{run_id}": _read("One run with its stages: state, attempts, duration, cache hit, error, traceback; the experiments its stages started",
                                run, found=True),
        "/runs/{run_id}/cancel": _action("Cancel a queued or running pipeline run", run),
        "/runs/{run_id}/logs": _read("A page of the output of the run's service driver (404 for a run no service "
                                     "started)", run, *_log_page(), found=True),
        "/runs/{run_id}/logs/{node}": _read("A page of what one stage printed and logged in one attempt (default: "
                                            "its latest), from a byte offset; 'next_offset' asks for the rest",
                                            run, _text("node", "the stage's node, as the run lists it ('score[3]')"),
                                            *_log_page(), found=True),
        "/experiments": _read("The latest experiments (Tuner searches, Trainer fits) with trial counts",
                              _limit(50)),
        "/experiments/{experiment_id}": _read("One experiment with its trials: config, status, last metrics",
                                              experiment, found=True),
        "/experiments/{experiment_id}/stop": _action("Stop a running experiment (all its trials)", experiment),
        "/experiments/{experiment_id}/metrics": _read(
            "The reported metrics by step of many trials of one experiment, by trial then step, a page at a "
            "time: {experiment_id, names, trials: [{trial_id, metrics: [{step, ...}]}], next}", experiment,
            {"name": "trial", "in": "query", "required": False, "explode": True,
             "description": "only these trials of the experiment (repeat: ?trial=3&trial=4; at most 500); "
                            "ids of other experiments' trials are left out",
             "schema": {"type": "array", "maxItems": 500,
                        "items": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}}},
            _names(), *_pages("TRIAL:STEP"), found=True),
        "/trials/{trial_id}": _read("One trial", trial, found=True),
        "/trials/{trial_id}/metrics": _read("A trial's reported metrics by step, a page at a time: "
                                            "{trial_id, names, metrics: [{step, ...}], next}", trial, _names(),
                                            *_pages("a step"), found=True),
        "/trials/{trial_id}/checkpoints": _read("A trial's kept checkpoints by step", trial, found=True),
        "/trials/{trial_id}/stop": _action("Stop a running trial", trial),
        "/deployments": _read(
            "Serve deployments, newest first", _limit(100),
            {"name": "status", "in": "query", "required": False, "description": "only deployments in this state",
             "schema": {"type": "string", "enum": ["deleted", "replaced", "running", "stopped"]}}),
        "/deployments/{app}/{deployment}/scale": _action(
            "Set a deployment's number of replicas", _text("app", "the application's name"),
            _text("deployment", "the deployment's name"),
            body={"type": "object", "required": ["replicas"],
                  "properties": {"replicas": {"type": "integer", "minimum": 0}}}),
        "/pipeline-deployments": {
            **_read("The service's pipeline deployments: schedule, next due time, paused, broken (with why), their "
                    "last runs"),
            **_code_action("Deploy a pipeline: name, target (an upload's or a module on the service's machine), and "
                           "deploy's options; the deployment as stored",
                           {"type": "object", "required": ["name", "target"],
                            "properties": {"name": {"type": "string"}, "target": {"type": "string"},
                                           "params": {"type": "object", "additionalProperties": True},
                                           "cron": {"type": "string"}, "timezone": {"type": "string"},
                                           "every": {"type": "number"}, "catchup": {"type": "boolean"},
                                           "max_active_runs": {"type": "integer", "minimum": 1},
                                           "priority": {"type": "integer"}, "pool": {"type": "string"},
                                           "paused": {"type": "boolean"}, "replace": {"type": "boolean"}},
                            "additionalProperties": True})},
        "/pipeline-uploads": _code_action(
            "Keep a .tar.gz of a pipeline's folder (the body, at most AIRFLOWLESS_SUBMIT_MAX_MB) signed in the "
            "storage; its target, for pipeline-submissions and pipeline-deployments",
            None, {"name": "module", "in": "query", "required": True,
                   "description": "the pipeline module's path inside the archive, e.g. pipelines/taxi.py",
                   "schema": {"type": "string"}}, media="application/octet-stream"),
        "/pipeline-submissions": _code_action(
            "Queue one run of a target for the service (parameters checked: a 422 names a bad one)",
            {"type": "object", "required": ["target"],
             "properties": {"target": {"type": "string"},
                            "params": {"type": "object", "additionalProperties": True},
                            "priority": {"type": "integer"}, "pool": {"type": "string"}}}),
        "/pipeline-deployments/{name}": _read("One pipeline deployment", _text("name", "the deployment's name"),
                                              found=True),
        "/pipeline-deployments/{name}/parameters": _read(
            "The deployment's pipeline parameters as its module declares them (name, type, required, default), "
            "each with the value a trigger runs with (422 when the module cannot be imported)",
            _text("name", "the deployment's name"), found=True),
        "/pipeline-deployments/{name}/trigger": _service_action(
            "Queue one run of the deployment now (422 names a parameter the pipeline does not take or of the "
            "wrong type)",
            {"type": "object", "properties": {"params": {"type": "object", "additionalProperties": True}}}),
        "/pipeline-deployments/{name}/pause": _service_action("Stop scheduling the deployment", None),
        "/pipeline-deployments/{name}/unpause": _service_action("Schedule the deployment again", None),
        "/pipeline-deployments/{name}/backfill": _service_action(
            "Queue one run per interval of the deployment's schedule in (start, end], oldest first",
            {"type": "object", "required": ["start", "end"],
             "properties": {"start": {"type": "string", "format": "date-time"},
                            "end": {"type": "string", "format": "date-time"},
                            "max_active_runs": {"type": "integer", "minimum": 1}, "rerun": {"type": "boolean"}}}),
        "/queue": _read("The queued runs in the order they would start, why each waits, and the pools"),
        "/models": _read("Registered models: the newest version, how many, the aliases"),
        "/models/{name}": _read("One registered model's versions, newest first: metrics, tags, aliases, lineage, the "
                                "serve deployments serving each",
                                _text("name", "the model's name"), found=True),
        "/live/data": _read("What the Data executor running now reports (operators, rows, bytes in flight)"),
        "/live/serve": _read("What serve running now reports (replicas, requests/s, latency, queues)"),
        "/openapi.json": _read("This document"),
    }
    servers = [{"url": served, "description": "the scheduler's --dashboard-prefix"}] if served else []
    return {
        "openapi": "3.0.3",
        **({"servers": servers} if servers else {}),
        "info": {"title": "airflowless control plane", "version": "1",
                 "description": "Runs, experiments, trials and deployments from the airflowless record, and "
                                "actions on the cluster. Reads are open on loopback; actions (and everything "
                                "when the server listens beyond loopback) need 'Authorization: Bearer <token>'."},
        "paths": {api + path: item for path, item in paths.items()},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
