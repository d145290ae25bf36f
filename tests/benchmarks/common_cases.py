"""Running benchmark cases (tests/benchmarks/cases/*.py) in fresh processes, interleaved."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def run_case(name: str, env: dict[str, str] | None = None, timeout: float = 900,
             python: str = sys.executable) -> dict[str, float]:
    """Run cases/NAME.py under ``python`` (another interpreter for a peer such as Ray); its figures."""
    done = subprocess.run([python, str(HERE / "harness.py"), str(HERE / "cases" / f"{name}.py")],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])  # type: ignore[no-any-return]
    raise RuntimeError(f"case {name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def compare(cases: list[str], repeats: int, env: dict[str, str] | None = None) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {c: [] for c in cases}
    for _ in range(repeats):
        for case in cases:
            results[case].append(run_case(case, env))
    return results


def median(results: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in results)


def spread(results: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in results]
    return f"{min(values):.3g}-{max(values):.3g}"


def ray_python() -> str | None:
    """An interpreter with Ray installed: $RAY_PYTHON, or this one if it imports ray; None if neither."""
    candidate = os.environ.get("RAY_PYTHON") or sys.executable
    found = subprocess.run([candidate, "-c", "import ray, psutil"], capture_output=True)
    return candidate if found.returncode == 0 else None
