"""Checking parameters against a deployed pipeline in a process of its own (for the REST API).

The control plane runs in the scheduler's process, which must not import users'
pipeline modules (their imports, their side effects, their memory). So a
trigger with parameters is checked by ``python -m airflowless.service.check``:
it reads ``{"target", "params", "scheduled"}`` as JSON on stdin, and prints
``{"params": ...}`` (exit 0) or ``{"error": ...}`` (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from ..errors import ParameterError

__all__ = ["check_params", "main"]

TIMEOUT_S = 60.0


def check_params(target: str, params: dict[str, Any], *, scheduled: bool = False) -> dict[str, Any]:
    """``params`` checked against the pipeline at ``target`` in a child process; :class:`ParameterError`."""
    request = json.dumps({"target": target, "params": params, "scheduled": scheduled})
    try:
        done = subprocess.run([sys.executable, "-m", "airflowless.service.check"], input=request,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ParameterError(f"checking the parameters against {target} took over {TIMEOUT_S:g} s "
                             "(its module's imports hang?)") from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise ParameterError(f"checking the parameters against {target} failed: {done.stderr[-500:]}") from None
    if "error" in answer:
        raise ParameterError(answer["error"])
    return dict(answer["params"])


def main() -> int:
    from .deploy import checked_params, resolve_target
    from .upload import local_target

    request = json.loads(sys.stdin.read())
    try:
        _, pipe = resolve_target(local_target(request["target"]))
        params = checked_params(pipe, request["params"], scheduled=bool(request.get("scheduled")))
    except Exception as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps({"params": params}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
