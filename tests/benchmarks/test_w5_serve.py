"""W5: online inference over HTTP — the taxi LogisticRegression behind POST /predict, 1 replica.

Run: python -m pytest tests/benchmarks/test_w5_serve.py --benchmarks -s
32 concurrent keep-alive connections for 20 s from a second process on loopback,
side by side with the same model in a bare uvicorn + Starlette app.
Target: airflowless (defaults) >= 900 req/s with p99 < 60 ms.
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
              f"errors {median(r, 'errors'):.0f}  peak {median(r, 'peak_rss_mb'):5.0f} MB")
    ratio = median(results["w5_airflowless"], "requests_per_s") / median(results["w5_bare"], "requests_per_s")
    print(f"  airflowless / bare uvicorn+Starlette req/s = {ratio:.2f}")
    assert median(results["w5_airflowless"], "errors") == 0
