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

__all__ = ["check_params", "describe_params", "main"]

TIMEOUT_S = 60.0


def check_params(target: str, params: dict[str, Any], *, scheduled: bool = False) -> dict[str, Any]:
    """``params`` checked against the pipeline at ``target`` in a child process; :class:`ParameterError`."""
    answer = _ask({"target": target, "params": params, "scheduled": scheduled}, "checking the parameters against")
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


def main() -> int:
    from ..dag.params import describe
    from .deploy import checked_params, resolve_target
    from .upload import local_target

    request = json.loads(sys.stdin.read())
    try:
        _, pipe = resolve_target(local_target(request["target"]))
        if request.get("describe"):
            answer: dict[str, Any] = {"parameters": describe(pipe.params)}
        else:
            answer = {"params": checked_params(pipe, request["params"], scheduled=bool(request.get("scheduled")))}
    except Exception as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
