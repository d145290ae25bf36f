"""Checking parameters against a deployed pipeline, and describing them, in a process of its own (for the
REST API).

The control plane runs in the scheduler's process, which must not import users'
pipeline modules (their imports, their side effects, their memory). So a
trigger with parameters is checked by ``python -m airflowless.service.check``:
it reads ``{"target", "params", "scheduled"}`` as JSON on stdin, and prints
``{"params": ...}`` (exit 0) or ``{"error": ...}`` (exit 2). Given
``{"target", "describe": true}`` it prints ``{"parameters": [...]}`` instead
(:func:`airflowless.dag.params.describe`: what the Trigger form is built from).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from ..errors import ParameterError

__all__ = ["check_params", "checked_run", "deploy_in_child", "describe_params", "main", "resolve_upload"]

TIMEOUT_S = 60.0


def check_params(target: str, params: dict[str, Any], *, scheduled: bool = False,
                 texts: bool = False) -> dict[str, Any]:
    """``params`` checked against the pipeline at ``target`` in a child process, as they will run;
    :class:`ParameterError`. ``texts``: a text value of a parameter that takes something else is parsed
    first, as ``--param`` would parse it (:func:`~airflowless.dag.params.parse_texts`)."""
    answer = _ask({"target": target, "params": params, "scheduled": scheduled, "texts": texts},
                  "checking the parameters against")
    return dict(answer["params"])


def describe_params(target: str) -> list[dict[str, Any]]:
    """The parameters of the pipeline at ``target`` (name, type, required, default), read in a child process;
    :class:`ParameterError` saying why they cannot be (its module fails to import, say)."""
    return list(_ask({"target": target, "describe": True}, "reading the parameters of")["parameters"])


def _ask(request: dict[str, Any], doing: str) -> dict[str, Any]:
    target = request["target"]
    try:
        done = subprocess.run([sys.executable, "-m", "airflowless.service.check"], input=json.dumps(request),
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ParameterError(f"{doing} {target} took over {TIMEOUT_S:g} s (its module's imports hang?)") from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise ParameterError(f"{doing} {target} failed: {done.stderr[-500:]}") from None
    if "error" in answer:
        raise ParameterError(answer["error"])
    return dict(answer)


def checked_run(target: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The pipeline's name at ``target`` and ``params`` checked against it (text parsed as ``--param``
    parses it), in a child process; :class:`ParameterError`."""
    answer = _ask({"target": target, "params": params, "texts": True}, "checking the parameters against")
    return str(answer["pipeline"]), dict(answer["params"])


def resolve_upload(target: str) -> str:
    """The pipeline's name in uploaded ``target`` (``submission:URI#MODULE`` or ``...#MODULE:NAME``), read in
    a child process: :class:`ParameterError` if its module does not import or holds no such pipeline."""
    return str(_ask({"target": target, "resolve": True}, "importing")["pipeline"])


def deploy_in_child(db_url: str, target: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
    """:func:`~.deploy.deploy` in a child process (it imports the module) on the record at ``db_url``; the
    deployment as stored (JSON); :class:`ParameterError` with what was wrong."""
    return dict(_ask({"target": target, "deploy": {"db": db_url, "name": name, "options": options}},
                     "deploying")["deployment"])


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        target = request["target"]
        if request.get("resolve") or request.get("deploy"):
            target = _named(target)
        if request.get("deploy"):  # deploy() loads and checks the module itself
            answer: dict[str, Any] = {"deployment": _deploy(target, request["deploy"])}
        else:
            answer = _about(target, request)
    except Exception as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps(answer))
    return 0


def _about(target: str, request: dict[str, Any]) -> dict[str, Any]:
    """What ``request`` asks of the pipeline at ``target``: its name, its parameters, or its parameters checked."""
    from ..dag.params import describe, parse_texts
    from .deploy import checked_params, resolve_target
    from .upload import local_target

    _, pipe = resolve_target(local_target(target))
    if request.get("resolve"):
        return {"pipeline": pipe.name}
    if request.get("describe"):
        return {"parameters": describe(pipe.params)}
    given = parse_texts(pipe.params, request["params"]) if request.get("texts") else request["params"]
    answer = {"params": checked_params(pipe, given, scheduled=bool(request.get("scheduled"))), "pipeline": pipe.name}
    return answer


def _named(target: str) -> str:
    """An uploaded target without its pipeline's name (``submission:URI#MODULE``) with it: the module's one
    pipeline."""
    from ..dag import load_pipeline
    from .upload import is_submission, local_target

    if not is_submission(target) or ":" in target.rpartition("#")[2]:
        return target
    local = local_target(f"{target}:?")  # unpacked; the module's path, and a placeholder name
    return f"{target}:{load_pipeline(local.rpartition(':')[0]).name}"


def _deploy(target: str, request: dict[str, Any]) -> dict[str, Any]:
    from ..control.reads import plain
    from ..store import open_store
    from .deploy import deploy

    store = open_store(request["db"])
    try:
        return dict(plain(deploy(target, request["name"], store=store, **request["options"])))
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
