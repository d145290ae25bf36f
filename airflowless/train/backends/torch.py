"""torch.distributed across ranks: gloo on CPU, nccl on GPU, rendezvous at rank 0's worker.

While its loop runs, a rank computes with as many torch threads as the CPUs it
holds (Ray's TorchTrainer does the same through ``OMP_NUM_THREADS``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .base import Backend, interface_of, listen_on, worker_host

__all__ = ["TorchBackend", "torch_device"]


def torch_device(use_gpu: bool) -> str:
    """``cuda:0`` on a GPU worker (each worker sees its one GPU as device 0), else ``cpu``."""
    return "cuda:0" if use_gpu else "cpu"


@dataclass
class TorchBackend(Backend):
    backend: str | None = None  # None: nccl with GPUs, else gloo
    timeout_s: float = 60.0
    equal_shards: bool = True
    threads: int | None = None  # torch intra-op threads in each rank (None: torch's default)
    modules = ("torch", "torch._dynamo", "torch.distributed")  # seconds to import: begun while data is prepared

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

        host = worker_host()
        timeout = datetime.timedelta(seconds=self.timeout_s)
        if spec.rank == 0:
            # the rendezvous store listens on the worker's own address only: torch's TCPStore
            # binds every interface unless it is handed a socket already listening
            listener = listen_on(host)
            port = listener.getsockname()[1]
            store = dist.TCPStore(host, port, spec.world_size, True, timeout, wait_for_workers=False,
                                  master_listen_fd=listener.detach())  # the store owns (and closes) it
            rendezvous.publish("master", (host, port))
            master = (host, port)
        else:
            master = tuple(rendezvous.receive("master"))
            store = dist.TCPStore(master[0], master[1], spec.world_size, False, timeout)
        if spec.use_gpu and torch.cuda.is_available():
            torch.cuda.set_device(0)
        # gloo's listeners bind the address of the interface it is given (else the host name's address)
        interface = interface_of(host)
        if interface is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
        dist.init_process_group(self.process_group_backend(spec.use_gpu), store=store, rank=spec.rank,
                                world_size=spec.world_size, timeout=timeout)
        del store  # the process group holds it; destroying the group closes it
        try:
            with _torch_threads(self.threads):
                yield {"master": master, "device": torch_device(spec.use_gpu)}
        finally:
            dist.destroy_process_group()


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` for the block (the worker process keeps its own after)."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
