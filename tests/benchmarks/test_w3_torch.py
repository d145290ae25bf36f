"""W3: data-parallel Torch MLP on taxi-M, 2 ranks with gloo, against one process with 2 threads (and 1).

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
    load = os.getloadavg()[0]
    results = compare(["w3_airflowless", "w3_single", "w3_single_1thread"], repeats,
                      env={"TAXI_PATH": path, "AIRFLOWLESS_HOME": f"{DATA}/home"})
    print(f"\nW3 Torch MLP taxi-M, 2 epochs, batch 1024 (Ray TorchTrainer: 152k samples/s here); "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    rates = {case: median(results[case], "samples") / median(results[case], "seconds") for case in results}
    for case in results:
        print(f"  {case:<18} {rates[case] / 1e3:7.0f} k samples/s  final loss {median(results[case], 'loss'):.4f}  "
              f"peak {median(results[case], 'peak_rss_mb'):6.0f} MB")
    ours = results["w3_airflowless"]
    print(f"  airflowless: {rates['w3_airflowless'] / rates['w3_single']:.2f}x one process with 2 threads, "
          f"{rates['w3_airflowless'] / rates['w3_single_1thread']:.2f}x with 1 thread; of its "
          f"{median(ours, 'seconds'):.1f} s: data {median(ours, 'data_s'):.1f}, "
          f"rendezvous {median(ours, 'rank0_rendezvous_s'):.1f}, training {median(ours, 'rank0_training_s'):.1f}")
    assert abs(median(ours, "loss") - median(results["w3_single"], "loss")) < 0.02  # same model, same data
