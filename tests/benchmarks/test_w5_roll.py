"""W5 under a rolling update (issue 28): the alias a PredictorDeployment follows is moved while W5's load runs.

Run: python -m pytest tests/benchmarks/test_w5_roll.py --benchmarks -s   (W5_SECONDS per window, default 20)
Target: zero failed requests, and p99 during the roll within 2x of the steady window's, same process, same load.
"""

from __future__ import annotations

import os

import pytest

from .common_cases import run_case


@pytest.mark.benchmark
def test_w5_roll() -> None:
    f = run_case("w5_roll", env={"AIRFLOWLESS_HOME": os.environ.get("W5_HOME", "/tmp/airflowless-w5-roll")},
                 timeout=900)
    print(f"\nW5 while the served model's alias moves ({f['generator']}, 32 connections)")
    print(f"  steady   {f['steady_requests_per_s']:7.0f} req/s  p50 {f['steady_p50_ms']:6.1f} ms  "
          f"p99 {f['steady_p99_ms']:6.1f} ms  errors {f['steady_errors']:.0f}")
    print(f"  rolling  {f['roll_requests_per_s']:7.0f} req/s  p50 {f['roll_p50_ms']:6.1f} ms  "
          f"p99 {f['roll_p99_ms']:6.1f} ms  errors {f['roll_errors']:.0f}  (roll took {f['roll_s']:.1f} s, "
          f"to version {f['rolled_to']:.0f})")
    print(f"  p99 rolling / steady = {f['roll_p99_ms'] / f['steady_p99_ms']:.2f} (limit 2)")
    assert f["roll_errors"] == 0 and f["rolled_to"] == 1
