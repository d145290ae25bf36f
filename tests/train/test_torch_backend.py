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


def _raises_while_its_peer_waits_in_allreduce() -> None:
    import torch

    from airflowless.train.torch import prepare_model

    model = prepare_model(torch.nn.Linear(4, 1))  # DistributedDataParallel: it holds the process group
    for step in range(50):
        if step == 2 and train.get_context().get_world_rank() == 1:
            raise ValueError("boom in rank 1")
        model(torch.ones(8, 4)).sum().backward()  # an allreduce of the gradients: rank 0 waits for rank 1 here
        train.report({"step": step})


def test_a_rank_that_raises_fails_the_fit_at_once_not_at_the_collectives_timeout() -> None:
    """The raising rank's model (in its traceback) must not keep the group's sockets open: rank 0, waiting in
    an allreduce, then only fails at gloo's timeout (a minute; issue 29.3). The error is rank 1's own."""
    import time

    from airflowless.errors import TrainingFailedError
    from airflowless.train.torch import TorchTrainer

    began = time.monotonic()
    with pytest.raises(TrainingFailedError, match="rank 1 failed: ValueError: boom in rank 1"):
        TorchTrainer(_raises_while_its_peer_waits_in_allreduce, scaling_config=ScalingConfig(num_workers=2)).fit()
    assert time.monotonic() - began < 30, "rank 0 waited for the collective's timeout (60 s)"
