"""What a Torch rank's process is set to while its loop runs: torch threads by its CPUs."""

from __future__ import annotations

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
