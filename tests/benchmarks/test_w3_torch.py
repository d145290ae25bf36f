"""W3: data-parallel Torch MLP on taxi-M, 2 ranks with gloo, against one process with 2 threads.

Run: python -m pytest tests/benchmarks/test_w3_torch.py --benchmarks -s
Samples/s over the whole fit (reading and feature step included for airflowless, as a user would run it).
"""

from __future__ import annotations

import os

import pytest

from .common_cases import compare, median

DATA = os.environ.get("AIRFLOWLESS_BENCH_DATA", "/tmp/airflowless-bench")


@pytest.mark.benchmark
def test_w3_torch_taxi_m() -> None:
    from airflowless.datasets import make_taxi

    path = f"{DATA}/taxi-m"
    make_taxi(2_000_000, n_files=16, path=path, seed=0)
    repeats = int(os.environ.get("W3_REPEATS", "1"))
    results = compare(["w3_airflowless", "w3_single"], repeats,
                      env={"TAXI_PATH": path, "AIRFLOWLESS_HOME": f"{DATA}/home"})
    print("\nW3 Torch MLP taxi-M, 2 epochs, batch 1024 (Ray TorchTrainer: 152k samples/s here)")
    for case in results:
        rate = median(results[case], "samples") / median(results[case], "seconds")
        print(f"  {case:<16} {rate / 1e3:7.0f} k samples/s  final loss {median(results[case], 'loss'):.4f}  "
              f"peak {median(results[case], 'peak_rss_mb'):6.0f} MB")
