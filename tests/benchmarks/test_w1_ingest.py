"""W1: streaming ingest of taxi-M — read parquet, feature step, filter, iterate 8192-row batches.

Run: python -m pytest tests/benchmarks/test_w1_ingest.py --benchmarks -s
Prints rows/s and peak memory (all processes) for airflowless, dask.dataframe (worker
processes) and the one-process pyarrow limit, and the ratios. Data: taxi-M (2M rows,
16 files) made once under $AIRFLOWLESS_BENCH_DATA (default /tmp/airflowless-bench).
"""

from __future__ import annotations

import os

import pytest

from .common_cases import compare, median, spread

DATA = os.environ.get("AIRFLOWLESS_BENCH_DATA", "/tmp/airflowless-bench")


@pytest.mark.benchmark
def test_w1_ingest_taxi_m() -> None:
    """Each system twice in one fresh process: the first pass (cold: it pays the process's first use of its
    libraries) and the second (warm); both figures, both ratios, and where airflowless's time went."""
    from airflowless.datasets import make_taxi

    path = f"{DATA}/taxi-m"
    make_taxi(2_000_000, n_files=16, path=path, seed=0)
    repeats = int(os.environ.get("W1_REPEATS", "3"))
    cases = ["w1_airflowless", "w1_dask", "w1_pyarrow"]
    results = compare(cases, repeats, env={"TAXI_PATH": path, "BENCH_WARM": "1"})
    rows = {c: results[c][0]["rows"] for c in cases}
    assert len(set(rows.values())) == 1, f"the systems disagree on the row count: {rows}"
    assert all(r["warm_rows"] == r["rows"] for c in cases for r in results[c])
    fares = {c: round(results[c][0]["fare_sum"], 2) for c in cases}
    assert len(set(fares.values())) == 1, f"the systems disagree on the fare sum: {fares}"
    print(f"\nW1 taxi-M ({rows['w1_pyarrow']:,} rows after the filter), median of {repeats} fresh-process runs")
    speed = {}
    for key, label in (("seconds", "first pass (cold)"), ("warm_seconds", "second pass (warm)")):
        speed[key] = {c: rows[c] / median(results[c], key) for c in cases}
        print(f" {label}:")
        for c in cases:
            print(f"  {c:<16} {speed[key][c] / 1e6:6.2f} M rows/s  ({spread(results[c], key)} s)")
        print(f"  airflowless / dask.dataframe = {speed[key]['w1_airflowless'] / speed[key]['w1_dask']:.2f}x "
              f"(target >= 2.5)")
        print(f"  airflowless / pyarrow limit  = {speed[key]['w1_airflowless'] / speed[key]['w1_pyarrow']:.2f}x "
              f"(target >= 0.5)")
    print(" peak RSS of all processes: " + ", ".join(f"{c} {median(results[c], 'peak_rss_mb'):.0f} MB" for c in cases))
    ours = results["w1_airflowless"]
    for prefix, label in (("", "cold"), ("warm_", "warm")):
        print(f" airflowless {label}: wall {median(ours, prefix + 'seconds' if prefix else 'seconds'):.3f} s = "
              f"driver waiting for batches {median(ours, prefix + 'waiting_s'):.3f} s + its loop body "
              f"{median(ours, prefix + 'consumer_s'):.3f} s; worker tasks (read, features, filter, hand-off) "
              f"{median(ours, prefix + 'tasks_s'):.3f} s over 2 workers, the slowest first task "
              f"{median(ours, prefix + 'first_task_s'):.3f} s; blocks through /dev/shm "
              f"{median(ours, 'shared_blocks'):.0f} of 16")


@pytest.mark.benchmark
def test_w1_taxi_l_under_a_1gib_block_budget() -> None:
    """taxi-L (20M rows, 80 files) with airflowless's block budget at 1 GiB, one cold pass each, beside the
    peers (dask.dataframe holds its partitions at will; pyarrow reads a file at a time)."""
    from airflowless.datasets import make_taxi

    path = f"{DATA}/taxi-l"
    make_taxi(20_000_000, n_files=80, path=path, seed=0)
    repeats = int(os.environ.get("W1_REPEATS", "1"))
    cases = ["w1_budget", "w1_dask", "w1_pyarrow"]
    results = compare(cases, repeats, env={"TAXI_PATH": path})
    rows = {c: results[c][0]["rows"] for c in cases}
    assert len(set(rows.values())) == 1, f"the systems disagree on the row count: {rows}"
    fares = {c: round(results[c][0]["fare_sum"], 2) for c in cases}
    assert len(set(fares.values())) == 1, f"the systems disagree on the fare sum: {fares}"
    speed = {c: rows[c] / median(results[c], "seconds") for c in cases}
    ours = results["w1_budget"]
    print(f"\nW1 taxi-L ({rows['w1_pyarrow']:,} rows after the filter), median of {repeats} fresh-process runs:")
    for c in cases:
        print(f"  {c:<16} {speed[c] / 1e6:6.2f} M rows/s  ({spread(results[c], 'seconds')} s), "
              f"peak RSS of all processes {median(results[c], 'peak_rss_mb'):.0f} MB")
    print(f"  airflowless / dask.dataframe = {speed['w1_budget'] / speed['w1_dask']:.2f}x, "
          f"/ pyarrow limit = {speed['w1_budget'] / speed['w1_pyarrow']:.2f}x; airflowless's peak block bytes held "
          f"{median(ours, 'peak_held_mb'):.0f} MB (budget {median(ours, 'budget_mb'):.0f} MB)")
    assert all(r["peak_held_mb"] <= r["budget_mb"] for r in ours)
