"""On gloo, prepare_model's DDP averages small gradient buckets by an all-gather: the same model as allreduce.

Two fits of two ranks, each rank on data of its own: one with what
prepare_model installs, one with ``gather_small_buckets=False`` and DDP's own
allreduce hook registered by the loop. A bucket over the limit goes by
allreduce in both. The trained weights are the same to the bit, and the same
on both ranks; the all-gathers are counted, so a hook that never gathers fails.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import pytest

from airflowless import train
from airflowless.train import ScalingConfig

pytestmark = pytest.mark.usefixtures("cluster_client", "home")

STEPS = 8


def _loop(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from airflowless.train.gather_buckets import GATHER_LIMIT_BYTES
    from airflowless.train.torch import prepare_model

    torch.manual_seed(0)  # the same initial weights on both ranks (DDP also broadcasts rank 0's)
    net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 400), torch.nn.ReLU(),
                              torch.nn.Linear(400, 400), torch.nn.ReLU(), torch.nn.Linear(400, 1))
    ours = config["ours"]
    model = prepare_model(net, ddp_kwargs={"bucket_cap_mb": 0.25},  # 400x400 floats: a bucket over the limit
                          gather_small_buckets=ours)
    if not ours:
        model.register_comm_hook(None, allreduce_hook)  # allowed: prepare_model registered none
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    rank = train.get_context().get_world_rank()
    inputs = torch.Generator().manual_seed(100 + rank)  # each rank's own data: gradients differ by rank
    gathers, original = [0], dist.all_gather_single

    def counted(*args: Any, **kwargs: Any) -> Any:
        gathers[0] += 1
        return original(*args, **kwargs)

    dist.all_gather_single = counted
    try:
        for _ in range(STEPS):
            x = torch.randn(256, 6, generator=inputs)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        dist.all_gather_single = original
    weights = b"".join(p.detach().numpy().tobytes() for p in model.module.parameters())
    digests = [None, None]
    dist.all_gather_object(digests, hashlib.sha256(weights).hexdigest())
    sizes = [b.buffer().numel() * b.buffer().element_size() * 2 for b in model.reducer._get_zeros_like_grad_buckets()]
    train.report({"hook": model._get_ddp_logging_data().get("comm_hook"), "digests": digests, "gathers": gathers[0],
                  "buckets": len(sizes), "small": sum(size <= GATHER_LIMIT_BYTES for size in sizes)})


def _train_embedding(model: Any) -> float:
    """Three SGD steps of a sparse embedding, the same inputs on every rank: DDP's average is one rank's."""
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.tensor([step, 7, 9])).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(getattr(model, "module", model).weight.detach().double().sum())


def _embedding() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Embedding(50, 4, sparse=True)


def _sparse_loop(config: dict[str, Any]) -> None:
    from airflowless.train.torch import prepare_model

    train.report({"sum": _train_embedding(prepare_model(_embedding()))})  # a sparse gradient: by allreduce


def _fit(loop: Any, config: dict[str, Any]) -> dict[str, Any]:
    from airflowless.train.torch import TorchTrainer

    result = TorchTrainer(loop, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2)).fit()
    assert result.error is None, result.error
    return dict(result.metrics)


def test_small_buckets_by_all_gather_give_the_weights_allreduce_gives() -> None:
    ours, theirs = _fit(_loop, {"ours": True}), _fit(_loop, {"ours": False})
    assert (ours["hook"], theirs["hook"]) == ("gather_small_buckets", "allreduce_hook")
    assert 0 < ours["small"] < ours["buckets"]  # the small layers' bucket(s) and the one with 400x400 floats
    # every small bucket gathered, the large one not: from the second step, as the first uses one bucket of
    # all the parameters (over the limit) and DDP builds its buckets at the second forward pass
    assert (STEPS - 1) * ours["small"] <= ours["gathers"] <= STEPS * ours["small"]
    assert theirs["gathers"] == 0
    assert len(set(ours["digests"])) == 1 and len(set(theirs["digests"])) == 1  # the ranks agree
    assert ours["digests"] == theirs["digests"]


def test_sparse_gradients_go_by_allreduce() -> None:
    assert _fit(_sparse_loop, {})["sum"] == pytest.approx(_train_embedding(_embedding()), rel=1e-6)


def test_a_failed_all_gather_is_an_error_not_a_sum() -> None:
    import torch

    from airflowless.train.gather_buckets import _mean_of_parts

    failed: torch.futures.Future[Any] = torch.futures.Future()
    averaged = failed.then(functools.partial(_mean_of_parts, torch.zeros(4), 2))
    failed.set_exception(RuntimeError("the other rank is gone"))
    with pytest.raises(RuntimeError, match="the other rank is gone"):
        averaged.wait()


def test_a_model_with_ddp_s_own_hook_keeps_it() -> None:
    """DDP's mixed precision registers a hook in its constructor: prepare_model must not fail on it."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.nn.parallel.distributed import _MixedPrecision

    from airflowless.train.gather_buckets import install

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        plain = DistributedDataParallel(torch.nn.Linear(4, 1))
        mixed = DistributedDataParallel(torch.nn.Linear(4, 1), mixed_precision=_MixedPrecision(param_dtype=torch.bfloat16))
        assert install(plain) and not install(mixed)
        assert mixed._get_ddp_logging_data().get("comm_hook") != "gather_small_buckets"
    finally:
        dist.destroy_process_group()
