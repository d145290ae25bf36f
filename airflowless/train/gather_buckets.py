"""Small gradient buckets averaged by one all-gather on gloo, where its allreduce is slow.

``DistributedDataParallel`` averages each bucket of gradients with an
allreduce. On gloo (CPU ranks) a small buffer's allreduce is bound by
latency, not bandwidth: between two ranks on this project's 2-core test
machine, 4,673 floats (the W3 MLP's single bucket) take 1.4 ms by allreduce
and 0.8 ms by an all-gather whose parts each rank then sums, and 131,072
floats 2.8 ms against 1.7 ms. The all-gather receives ``world_size`` times the
bucket and sends it ``world_size - 1`` times, so it loses once buckets grow
(1,048,576 floats: 4.5 ms against 7.1 ms): only buckets whose gathered parts
fit in :data:`GATHER_LIMIT_BYTES` go this way, the rest by DDP's own allreduce.

The result is DDP's average: every rank divides its gradients by the world
size and the parts are summed in rank order. With two ranks that is the
same sum as gloo's, to the bit; with more, the order of the additions may
differ from gloo's ring in the last bit, as it does between gloo's own
algorithms.

:func:`install` registers the hook at the model's first forward pass, so a
hook the user registers before that (``model.register_comm_hook``, an FP16
compression, DDP's ``mixed_precision``) is used instead.
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["GATHER_LIMIT_BYTES", "gather_small_buckets", "install"]

GATHER_LIMIT_BYTES = 1 << 20  # a bucket's parts from all ranks together


def gather_small_buckets(process_group, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations
    """A DDP communication hook: average ``bucket`` by all-gather when small, else by DDP's allreduce."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    buffer = bucket.buffer()
    world = dist.get_world_size(process_group)
    if buffer.numel() * buffer.element_size() * world > GATHER_LIMIT_BYTES:
        return allreduce_hook(process_group, bucket)
    parts = buffer.new_empty(world * buffer.numel())
    buffer.div_(world)
    work = dist.all_gather_single(parts, buffer, group=process_group, async_op=True)
    return work.get_future().then(lambda _: parts.view(world, -1).sum(0))


def install(model: Any) -> None:
    """Use :func:`gather_small_buckets` for ``model`` (a DDP on gloo) unless it has a hook by its first forward."""
    handle: Any = None

    def register(module: Any, args: Any) -> None:
        handle.remove()
        if getattr(module, "_comm_hooks", None) != []:  # DDP lists the hooks registered through its API
            return
        with contextlib.suppress(RuntimeError):  # DDP's _register_builtin_comm_hook registered one: kept
            module.register_comm_hook(module.process_group, gather_small_buckets)

    handle = model.register_forward_pre_hook(register)
