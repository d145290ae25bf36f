"""What opening the control plane's pages costs the scheduler: W4a trials/s and W1 rows/s, pages closed vs open.

Run: python -m pytest tests/benchmarks/test_pages_cost.py --benchmarks -s
Each case is a fresh process with the embedded cluster and its dashboard on. Closed: no browser.
Open: headless Chromium (Debian's ``chromium``) shows the experiments page, and for W4a the running
experiment's page (trial table and learning curves) while the work runs. The runs alternate
(closed, open, closed, open, ...; PAGES_REPEATS, default 3) and the medians are compared; the
issue's bar is a drop of at most 5%. An open run must have had the scheduler answer API requests
during the timed work and its page must show the work's result; a closed run must have answered none.
W1 makes PAGES_W1_PASSES passes over taxi-M (default 5) so the page refreshes while it runs.
Beside the rates it prints the CPU seconds the driver's process (which holds the embedded scheduler)
and Chromium used during the work: on a busy machine the rates are noisy, those much less so.
"""

from __future__ import annotations

import os
import shutil
import statistics

import pytest

from .common_cases import run_case

DATA = os.environ.get("AIRFLOWLESS_BENCH_DATA", "/tmp/airflowless-bench")
BAR = 0.05


def _interleaved(case: str, repeats: int, env: dict[str, str]) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {"closed": [], "open": []}
    for _ in range(repeats):
        for mode in results:
            results[mode].append(run_case(case, env={**env, "PAGES": mode}))
    return results


def _report(title: str, unit: str, amount: str, results: dict[str, list[dict[str, float]]]) -> float:
    rates = {mode: [r[amount] / r["work_seconds"] for r in runs] for mode, runs in results.items()}
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    drop = 1 - medians["open"] / medians["closed"]
    print(f"\n{title}, median of {len(rates['closed'])} interleaved fresh-process runs each")
    for mode, values in rates.items():
        requests = [int(r["api_requests"]) for r in results[mode]]
        print(f"  pages {mode:<6} {medians[mode]:12,.1f} {unit}  ({min(values):,.1f}-{max(values):,.1f})  "
              f"API requests served during the work: {requests}")
        print(f"               CPU seconds during the work, median: driver+scheduler process "
              f"{statistics.median(r['driver_cpu_s'] for r in results[mode]):.2f}, "
              f"Chromium {statistics.median(r['browser_cpu_s'] for r in results[mode]):.2f}")
    print(f"  drop with the pages open: {drop * 100:+.1f}% (bar: at most {BAR * 100:.0f}%)")
    for r in results["open"]:
        assert r["api_requests"] > 0 and r["api_errors"] == 0, f"the open page did not poll cleanly: {r}"
        assert str(r["page"]).startswith("updated"), r
    assert all(r["api_requests"] == 0 for r in results["closed"]), results["closed"]
    return drop


@pytest.mark.benchmark
def test_pages_cost_w4a_and_w1() -> None:
    from airflowless.datasets import make_taxi
    from tests.support.pages import chromium

    assert chromium() is not None, "chromium is not installed (apt-get install -y chromium)"
    repeats = int(os.environ.get("PAGES_REPEATS", "3"))
    home = f"{DATA}/pages-home"
    shutil.rmtree(home, ignore_errors=True)  # the same record for every run of this sitting
    env = {"AIRFLOWLESS_HOME": home, "AIRFLOWLESS_DB": "", "TAXI_PATH": f"{DATA}/taxi-m"}
    make_taxi(2_000_000, n_files=16, path=env["TAXI_PATH"], seed=0)
    w4a = _report("W4a 200 trials x 10 reports", "trials/s", "trials", _interleaved("pages_w4a", repeats, env))
    w1 = _report("W1 taxi-M", "rows/s", "rows", _interleaved("pages_w1", repeats, env))
    print(f"\nload average at the end: {os.getloadavg()}")
    assert w4a <= BAR and w1 <= BAR, f"the pages cost too much: W4a {w4a:+.1%}, W1 {w1:+.1%}"
