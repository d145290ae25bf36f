"""W5: online inference over HTTP — the taxi LogisticRegression behind POST /predict, 1 replica.

Run: python -m pytest tests/benchmarks/test_w5_serve.py --benchmarks -s
Load: ``wrk -t2 -c32 -d20s`` posting one JSON row (cases/w5_common.py; a Python
generator when wrk is missing) from a second process on loopback, side by side
with the same model in a bare uvicorn + Starlette app on the same event loop
and HTTP parser (uvloop + httptools when installed). Each line also gives the
servers' CPU ms per request and the load average: on the shared 2-core
machine the latencies follow the other processes' load, the CPU cost less so.
Target (issue 16): airflowless p99 <= 2x the bare app's, at no lower req/s.
"""

from __future__ import annotations

import os

import pytest

from .common_cases import compare, median, spread


@pytest.mark.benchmark
def test_w5_serve() -> None:
    repeats = int(os.environ.get("W5_REPEATS", "2"))
    cases = ["w5_airflowless", "w5_bare"]
    results = compare(cases, repeats, env={"AIRFLOWLESS_HOME": os.environ.get("W5_HOME", "/tmp/airflowless-w5")})
    print(f"\nW5 serve, 32 connections, median of {repeats} fresh-process runs")
    for c in cases:
        r = results[c]
        print(f"  {c:<16} {median(r, 'requests_per_s'):7.0f} req/s ({spread(r, 'requests_per_s')})  "
              f"p50 {median(r, 'p50_ms'):6.1f} ms  p99 {median(r, 'p99_ms'):6.1f} ms  "
              f"errors {median(r, 'errors'):.0f}  peak {median(r, 'peak_rss_mb'):5.0f} MB  "
              f"cpu {median(r, 'server_cpu_ms_per_request'):.2f} ms/req  load {median(r, 'load_average'):.1f}  "
              f"{r[0]['loop']}/{r[0]['http']} {r[0]['generator']}")
    ratio = median(results["w5_airflowless"], "requests_per_s") / median(results["w5_bare"], "requests_per_s")
    p99_ratio = median(results["w5_airflowless"], "p99_ms") / median(results["w5_bare"], "p99_ms")
    print(f"  airflowless / bare uvicorn+Starlette req/s = {ratio:.2f}, p99 = {p99_ratio:.2f}")
    assert median(results["w5_airflowless"], "errors") == 0
