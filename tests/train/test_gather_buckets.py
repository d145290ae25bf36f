"""On gloo, prepare_model's DDP averages small gradient buckets by an all-gather: the same model as allreduce.

Two fits of two ranks, each rank on data of its own: one with what
prepare_model installs, one whose loop registers DDP's own allreduce hook
first (a user's hook wins). A bucket over the limit goes by allreduce in
both. The trained weights are the same to the bit, and the same on both ranks.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from airflowless import train
from airflowless.train import ScalingConfig

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def _loop(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from airflowless.train.torch import prepare_model

    torch.manual_seed(0)  # the same initial weights on both ranks (DDP also broadcasts rank 0's)
    net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 400), torch.nn.ReLU(),
                              torch.nn.Linear(400, 400), torch.nn.ReLU(), torch.nn.Linear(400, 1))
    model = prepare_model(net, ddp_kwargs={"bucket_cap_mb": 0.25})  # 400x400 floats: a bucket over the limit
    if config["users_hook"]:
        model.register_comm_hook(dist.group.WORLD, allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    rank = train.get_context().get_world_rank()
    inputs = torch.Generator().manual_seed(100 + rank)  # each rank's own data: gradients differ by rank
    for _ in range(8):
        x = torch.randn(256, 6, generator=inputs)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = b"".join(p.detach().numpy().tobytes() for p in model.module.parameters())
    digests = [None, None]
    dist.all_gather_object(digests, hashlib.sha256(weights).hexdigest())
    train.report({"hook": model._get_ddp_logging_data().get("comm_hook"), "digests": digests,
                  "buckets": len(model.reducer._get_zeros_like_grad_buckets())})


def _fit(users_hook: bool) -> dict[str, Any]:
    from airflowless.train.torch import TorchTrainer

    result = TorchTrainer(_loop, train_loop_config={"users_hook": users_hook},
                          scaling_config=ScalingConfig(num_workers=2)).fit()
    assert result.error is None, result.error
    return dict(result.metrics)


def test_small_buckets_by_all_gather_give_the_weights_allreduce_gives() -> None:
    ours, theirs = _fit(users_hook=False), _fit(users_hook=True)
    assert ours["hook"] == "gather_small_buckets"
    assert theirs["hook"] == "allreduce_hook"  # registered before the first forward: it replaces ours
    assert ours["buckets"] >= 2
    assert len(set(ours["digests"])) == 1 and len(set(theirs["digests"])) == 1  # the ranks agree
    assert ours["digests"] == theirs["digests"]
