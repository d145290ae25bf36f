"""W8: the DAG engine's own cost against dask.delayed on the same cluster (2 worker processes x 1 thread).

Run: python -m pytest tests/benchmarks/test_w8_engine.py --benchmarks -s   (W8_WIDE=1 adds the 2,000-way fan-out)
Targets (issue 25): fan-out stages/s >= 0.8x dask.delayed's with every stage recorded; chain ms per stage <= 1.3x.
"""

from __future__ import annotations

import os

import pytest

from .common_cases import run_case


@pytest.mark.benchmark
def test_w8_engine() -> None:
    figures = run_case("w8_engine", env={"AIRFLOWLESS_HOME": "/tmp/airflowless-bench/home"}, timeout=1800)
    print(f"\nW8 engine cost, medians of {os.environ.get('W8_ROUNDS', '3')} rounds after a warm one")
    base = figures["chain dask.delayed"]
    print(f"  chain of 50, ms per stage: dask.delayed {base / 50 * 1000:.2f}")
    for case in ("chain cache off", "chain cache on"):
        print(f"    airflowless {case.removeprefix('chain '):<10} {figures[case] / 50 * 1000:7.2f}  x{figures[case] / base:.2f}")
    for label, width, prefix in (("fan-out of 200", 200, "fan"), ("fan-out of 2,000", 2000, "wide")):
        base_case = f"{prefix} dask.delayed"
        if base_case not in figures:
            continue
        rate = width / figures[base_case]
        print(f"  {label}, stages/s: dask.delayed {rate:.0f}")
        for case in [c for c in figures if c.startswith(prefix + " ") and c != base_case]:
            ours = width / figures[case]
            print(f"    airflowless {case.removeprefix(prefix + ' '):<16} {ours:7.0f}  x{ours / rate:.2f}")
