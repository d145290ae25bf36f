"""Small gradient buckets averaged by one all-gather on gloo, where its allreduce is slow.

``DistributedDataParallel`` averages each bucket of gradients with an
allreduce. On gloo (CPU ranks) a small buffer's allreduce is bound by
latency, not bandwidth: between two ranks on this project's 2-core test
machine, 4,673 floats (the W3 MLP's single bucket) take 1.4 ms by allreduce
and 0.8 ms by an all-gather whose parts each rank then sums, and 131,072
floats 2.8 ms against 1.7 ms. The all-gather receives ``world_size`` times the
bucket and sends it ``world_size - 1`` times, so it loses once buckets grow
(1,048,576 floats: 4.5 ms against 7.1 ms): only buckets whose gathered parts
fit in :data:`GATHER_LIMIT_BYTES` go this way; larger ones, and sparse
gradients, go by DDP's own allreduce.

The result is DDP's average: every rank divides its gradients by the world
size and the parts are summed in rank order. With two ranks that is gloo's
sum to the bit; with more, the order of the additions differs from gloo's
ring, so the last bits may too (and more for float16/bfloat16, which torch
sums with a float32 accumulator where gloo rounds at every addition).

:func:`install` registers the hook when ``prepare_model`` wraps the model,
on every rank, so that ranks that have run out of data and ``join()`` run
the same collective. DDP takes one communication hook per model: to use
your own, pass ``prepare_model(..., gather_small_buckets=False)``. With any
hook, torch ignores ``join(divide_by_initial_world_size=False)``.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["GATHER_LIMIT_BYTES", "gather_small_buckets", "install"]

GATHER_LIMIT_BYTES = 1 << 20  # a bucket's parts from all ranks together


def gather_small_buckets(process_group, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations
    """A DDP communication hook: average ``bucket`` by all-gather when small, else by DDP's allreduce."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    buffer = bucket.buffer()
    world = dist.get_world_size(process_group)
    if buffer.is_sparse or buffer.numel() * buffer.element_size() * world > GATHER_LIMIT_BYTES:
        return allreduce_hook(process_group, bucket)
    parts = buffer.new_empty(world * buffer.numel())
    buffer.div_(world)
    work = dist.all_gather_single(parts, buffer, group=process_group, async_op=True)
    return work.get_future().then(functools.partial(_mean_of_parts, parts, world))


def _mean_of_parts(parts: Any, world: int, gathered: Any) -> Any:
    gathered.value()  # raises what the all-gather raised (a peer gone, a timeout): never a sum of garbage
    return parts.view(world, -1).sum(0)


def install(model: Any) -> bool:
    """Register :func:`gather_small_buckets` on ``model`` (a DDP on gloo); False where DDP needs its own hook.

    DDP registers a hook itself for ``mixed_precision`` (in its constructor)
    and for an optimizer applied in backward (``_apply_optimizer_in_backward``,
    at the first forward pass: applied after ``prepare_model``, it needs
    ``gather_small_buckets=False``), and calls hooks differently under
    compiled autograd's Python reducer; those keep DDP's own.
    """
    import torch.distributed as dist

    if getattr(model, "_comm_hooks", None) or getattr(model, "_use_python_reducer", False) or any(
            hasattr(p, "_in_backward_optimizers") for p in model.parameters()):
        return False
    group = model.process_group
    model.register_comm_hook(None if group == dist.group.WORLD else group, gather_small_buckets)
    return True
