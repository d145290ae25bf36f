"""glibc keeps the memory a rank frees for its next step (train.rank_memory), in Dask's worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from airflowless import train
from airflowless.train import DataParallelTrainer, ScalingConfig
from tests.support.eventually import eventually


def faults_per_step(elements: int = 1 << 16) -> float:
    """Page faults per allocation and release of an array of ``elements`` float32 (256 KiB: one small step's
    activations; a fresh mapping of 64 pages each time above Dask's fixed 128 KiB mmap threshold)."""
    import resource

    import numpy as np

    np.ones(elements, np.float32).sum()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        np.ones(elements, np.float32).sum()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50


def faults_per_large_step(held: int = 16, rounds: int = 10) -> float:
    """Page faults per 2 MiB array, ``held`` of them alive at once (512 pages each time above the fixed
    threshold; under numpy's 4 MiB, above which it asks for huge pages). A 2 MiB array is mapped afresh only if
    the threshold is back, or reused from a free chunk of the heap whatever it is: glibc trims the top of a heap,
    not a chunk in its middle, and a buffer made while memory was kept and freed after the rank's trim stays
    resident there (CI once saw 0 faults with one array at a time). Holding ``held`` at once, a few such chunks
    serve a few of them; the rest are fresh mappings."""
    import resource

    import numpy as np

    def step() -> None:
        arrays = [np.ones(1 << 19, np.float32) for _ in range(held)]
        sum(float(a.sum()) for a in arrays)

    step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        step()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / (rounds * held)


_NESTED = """
import sys
sys.path.insert(0, sys.argv[1])
from airflowless.train.rank_memory import freed_memory_kept
from tests.train.test_rank_memory import faults_per_step

outside = faults_per_step()
with freed_memory_kept():
    with freed_memory_kept():  # a second rank in the same process
        pass
    inside = faults_per_step()  # the first one still runs
print(outside, inside, faults_per_step())
"""


def test_freed_memory_is_kept_while_any_rank_of_the_process_runs() -> None:
    # Dask's workers start with this setting: every 256 KiB array is a fresh mapping of zeroed pages
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    done = subprocess.run([sys.executable, "-c", _NESTED, root], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    outside, inside, after = (float(v) for v in done.stdout.split())
    assert outside >= 32  # 512 pages of 4 KiB faulted in again every time
    assert inside < 1
    assert after >= 32  # the worker's own setting is back after the last rank


def _holders() -> tuple[dict[int, int], list[int]]:
    """The threads inside ``freed_memory_kept`` and the ranks running, on a worker (for the failure message)."""
    from airflowless.train import rank_memory
    from airflowless.train.rank_threads import running_ranks

    return dict(rank_memory._holders), running_ranks()


def _report_faults() -> None:
    import os

    from distributed import get_worker

    rank = train.get_context().world_rank
    train.report({"faults": faults_per_step(), f"worker_{rank}": get_worker().address,
                  f"trim_{rank}": os.environ.get("MALLOC_TRIM_THRESHOLD_")})


@pytest.mark.usefixtures("home")
def test_every_backends_ranks_keep_freed_memory_and_their_workers_get_dasks_setting_back(
        cluster_client: Any) -> None:
    # no rank of an earlier test is inside the block on any worker (they were ended with their fits). Not
    # "every worker faults now": before a worker's first rank, glibc's own moving mmap threshold may have grown
    # (a large buffer freed by an import), so a fresh worker may reuse memory already; a rank's end sets the
    # threshold back to Dask's fixed 128 KiB for good, which the last assertion checks
    eventually(lambda: all(held == ({}, []) for held in cluster_client.run(_holders).values()), timeout=30,
               message=lambda: f"ranks inside the block: {cluster_client.run(_holders)}")
    result = DataParallelTrainer(_report_faults, scaling_config=ScalingConfig(num_workers=2)).fit()
    # page faults are counted for the whole process, whose other threads (the event loop, comms) fault pages
    # too: kept, a step costs a few at most, against the 64 of a fresh mapping
    assert result.error is None and result.metrics["faults"] < 16, result.metrics
    worker = result.metrics["worker_0"]  # rank 0's worker: it kept memory while the rank ran, and is back now
    after = cluster_client.run(faults_per_large_step)
    assert after[worker] >= 256, (f"after the fit: {after}; rank 0 on {worker} (MALLOC_TRIM_THRESHOLD_="
                                 f"{result.metrics['trim_0']}); inside the block: {cluster_client.run(_holders)}")
