"""torch.distributed across ranks: gloo on CPU, nccl on GPU, rendezvous at rank 0's worker."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .base import Backend, free_port, worker_host

__all__ = ["TorchBackend", "torch_device"]


def torch_device(use_gpu: bool) -> str:
    """``cuda:0`` on a GPU worker (each worker sees its one GPU as device 0), else ``cpu``."""
    return "cuda:0" if use_gpu else "cpu"


@dataclass
class TorchBackend(Backend):
    backend: str | None = None  # None: nccl with GPUs, else gloo
    timeout_s: float = 60.0
    equal_shards: bool = True

    def process_group_backend(self, use_gpu: bool) -> str:
        return self.backend or ("nccl" if use_gpu else "gloo")

    @contextlib.contextmanager
    def rank_context(self, spec: Any, rendezvous: Any) -> Iterator[dict[str, Any]]:
        # torch._dynamo is imported (DistributedDataParallel imports it) before the group
        # exists: it keeps a reference to the process group present when it is first
        # imported, whose store and gloo listeners would then stay open after the group
        # is destroyed.
        import torch
        import torch._dynamo  # noqa: F401
        import torch.distributed as dist

        if spec.rank == 0:
            host = worker_host()
            rendezvous.publish("master", (host, free_port(host)))
        host, port = rendezvous.receive("master")
        if spec.use_gpu and torch.cuda.is_available():
            torch.cuda.set_device(0)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo" if host.startswith("127.") else os.environ.get(
            "GLOO_SOCKET_IFNAME", ""))
        if not os.environ["GLOO_SOCKET_IFNAME"]:
            os.environ.pop("GLOO_SOCKET_IFNAME")
        dist.init_process_group(self.process_group_backend(spec.use_gpu), init_method=f"tcp://{host}:{port}",
                                rank=spec.rank, world_size=spec.world_size,
                                timeout=datetime.timedelta(seconds=self.timeout_s))
        try:
            yield {"master": (host, port), "device": torch_device(spec.use_gpu)}
        finally:
            dist.destroy_process_group()
