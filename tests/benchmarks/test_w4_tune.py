"""W4: Tune overhead (200 no-work trials x 10 reports) and ASHA search quality on the synthetic curve.

Run: python -m pytest tests/benchmarks/test_w4_tune.py --benchmarks -s
(a) trials/s for airflowless (trials as Dask tasks on worker processes) and Optuna in one process (the floor).
(b) ASHA, 64 trials, max_t=100, grace 1, reduction 3: best loss, iterations spent, wall seconds; FIFO with
    the same iteration budget; Optuna successive halving in one process.
"""

from __future__ import annotations

import math
import os

import pytest

from .common_cases import compare, median, run_case


@pytest.mark.benchmark
def test_w4a_overhead() -> None:
    repeats = int(os.environ.get("W4_REPEATS", "3"))
    results = compare(["w4a_airflowless", "w4a_optuna"], repeats, env={"AIRFLOWLESS_HOME": "/tmp/airflowless-bench/home"})
    ours = 200 / median(results["w4a_airflowless"], "seconds")
    floor = 200 / median(results["w4a_optuna"], "seconds")
    print(f"\nW4a 200 trials x 10 reports: airflowless {ours:.1f} trials/s, Optuna one process {floor:.0f} trials/s "
          f"(Ray Tune 0.79 here: x{ours / 0.79:.0f}); per trial {1000 / ours:.1f} ms")


@pytest.mark.benchmark
def test_w4b_asha_quality() -> None:
    env = {"AIRFLOWLESS_HOME": "/tmp/airflowless-bench/home"}
    asha = run_case("w4b_airflowless", env={**env, "W4_SCHEDULER": "asha"})
    budget_trials = max(1, math.ceil(asha["iterations"] / 100))
    fifo = run_case("w4b_airflowless", env={**env, "W4_SCHEDULER": "fifo", "W4_SAMPLES": str(budget_trials)})
    optuna = run_case("w4b_optuna")
    print("\nW4b synthetic curve, 64 trials (Ray Tune: 86-95 s, 327-362 iterations, best 0.0011)")
    for name, r in (("airflowless ASHA", asha), (f"airflowless FIFO x{budget_trials}", fifo), ("Optuna SHA", optuna)):
        print(f"  {name:<24} best loss {r['best_loss']:8.4f}  iterations {r['iterations']:5d}  {r['seconds']:6.2f} s")
