"""Helpers for benchmarks: fresh-process timing, interleaved runs, a ratio table."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def time_fresh_process(code: str, *, env: dict[str, str] | None = None, timeout: float = 120) -> float:
    """Wall seconds of ``python -c code`` in a new interpreter (start to exit)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"benchmark process failed:\n{done.stderr[-2000:]}")
    return took


def interleaved(cases: dict[str, str], repeats: int, **kwargs: object) -> dict[str, list[float]]:
    """Run every case ``repeats`` times, alternating, so drift hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, code in cases.items():
            times[name].append(time_fresh_process(code, **kwargs))  # type: ignore[arg-type]
    return times


def report(title: str, times: dict[str, list[float]], baseline: str, unit: str = "s") -> dict[str, float]:
    """Print median (min-max) per case and the ratio to ``baseline``; return the medians."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"\n{title}")
    for name, values in times.items():
        ratio = medians[name] / medians[baseline]
        print(f"  {name:<28} {medians[name]:7.3f} {unit}  ({min(values):.3f}-{max(values):.3f})"
              f"  x{ratio:.3f} of {baseline}")
    return medians
