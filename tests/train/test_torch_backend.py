"""What a Torch rank's process is set to while its loop runs: torch threads by its CPUs, glibc keeping freed memory."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from airflowless import train
from airflowless.train import ScalingConfig

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def _report_threads() -> None:
    import torch

    train.report({"threads": torch.get_num_threads()})


def _set_threads(count: int) -> int:
    import torch

    torch.set_num_threads(count)
    return int(torch.get_num_threads())


def _threads() -> int:
    import torch

    return int(torch.get_num_threads())


def test_a_rank_computes_with_one_thread_per_cpu_and_its_worker_gets_its_own_back(cluster_client: Any) -> None:
    from airflowless.train.torch import TorchTrainer

    # the workers compute with 2 torch threads of their own; a rank holding 1 CPU must use 1
    assert set(cluster_client.run(_set_threads, 2).values()) == {2}
    try:
        result = TorchTrainer(_report_threads, scaling_config=ScalingConfig(num_workers=2)).fit()
        assert result.error is None
        assert result.metrics["threads"] == 1
        assert set(cluster_client.run(_threads).values()) == {2}
    finally:
        cluster_client.run(_set_threads, 1)


_FAULTS_PER_STEP = """
import resource, sys
import numpy as np
from airflowless.train.backends.torch import freed_memory_kept

def faults_per_step():  # one step's 256 KiB activations, allocated and freed
    np.ones(1 << 16, np.float32).sum()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        np.ones(1 << 16, np.float32).sum()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200

outside = faults_per_step()
with freed_memory_kept():
    inside = faults_per_step()
print(outside, inside, faults_per_step())
"""


def test_freed_memory_is_reused_in_a_dask_worker_process_while_a_rank_trains() -> None:
    # Dask's workers start with this setting: every 256 KiB array is a fresh mapping of zeroed pages
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    done = subprocess.run([sys.executable, "-c", _FAULTS_PER_STEP], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    outside, inside, after = (float(v) for v in done.stdout.split())
    assert outside >= 32  # 64 pages of 4 KiB faulted in again every time
    assert inside < 1
    assert after >= 32  # the worker's own setting is back after the block
