"""Run one benchmark case in a fresh process and measure it: wall seconds and peak RSS of the process tree.

A case is Python code defining ``setup()`` (not timed: cluster start, warm-up)
and ``run()`` (timed; returns a dict of figures). ``python harness.py CASE_FILE``
prints one JSON line with the figures, ``seconds`` and ``peak_rss_mb``. With
``BENCH_WARM=1``, ``run()`` runs a second time in the same process: its time is
``warm_seconds`` and its figures are prefixed ``warm_`` (the first run pays each
process's first use of its libraries: imports, first tasks; the second does not).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time


def _tree_rss() -> int:
    import psutil

    me = psutil.Process()
    total = 0
    for proc in [me, *me.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(setup: object, run: object) -> dict[str, object]:
    setup()  # type: ignore[operator]
    peak = [_tree_rss()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    figures = run()  # type: ignore[operator]
    seconds = time.perf_counter() - start
    warm: dict[str, object] = {}
    if os.environ.get("BENCH_WARM") == "1":
        start = time.perf_counter()
        again = run()  # type: ignore[operator]
        warm = {"warm_seconds": time.perf_counter() - start, **{f"warm_{k}": v for k, v in (again or {}).items()}}
    stop.set()
    sampler.join()
    return {**(figures or {}), "seconds": seconds, **warm, "peak_rss_mb": peak[0] / 2**20}


if __name__ == "__main__":
    namespace = runpy.run_path(sys.argv[1], run_name="benchmark_case")
    result = measure(namespace["setup"], namespace["run"])
    teardown = namespace.get("teardown")
    if teardown:
        teardown()
    print("RESULT " + json.dumps(result), flush=True)
