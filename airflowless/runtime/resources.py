"""Planning the embedded cluster's workers: how many, with what resources.

Pure functions (no Dask, no processes) so the GPU placement can be tested on
a machine without GPUs.

>>> plan_workers(cpus=4, gpus=())
[WorkerPlan(name='cpu-0', nthreads=1, resources={'CPU': 1.0}, env={}), ...]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["WorkerPlan", "plan_workers", "detect_gpus"]


@dataclass(frozen=True)
class WorkerPlan:
    """One worker process to start: its name, threads, declared resources and env."""

    name: str
    nthreads: int
    resources: dict[str, float]
    env: dict[str, str] = field(default_factory=dict)


def detect_gpus(cuda_visible_devices: str | None) -> tuple[str, ...]:
    """The GPU ids this machine offers, without importing any framework.

    ``CUDA_VISIBLE_DEVICES`` wins when set (empty means none); otherwise the
    NVIDIA driver's ``/proc`` listing is counted.
    """
    if cuda_visible_devices is not None:
        return tuple(d.strip() for d in cuda_visible_devices.split(",") if d.strip() not in {"", "-1"})
    listing = Path("/proc/driver/nvidia/gpus")
    if listing.is_dir():
        return tuple(str(i) for i in range(len(list(listing.iterdir()))))
    return ()


def plan_workers(
    *, cpus: int | None = None, gpus: tuple[str, ...] = (), n_workers: int | None = None,
    threads_per_worker: int = 1,
) -> list[WorkerPlan]:
    """Workers for an embedded cluster.

    Without GPUs: ``n_workers`` (default one per core) processes of
    ``threads_per_worker`` threads, each declaring ``CPU=threads``. With GPUs:
    one worker per GPU, pinned by ``CUDA_VISIBLE_DEVICES``, declaring ``GPU=1``
    and an even share of the cores.
    """
    cpus = cpus or os.cpu_count() or 1
    if gpus:
        share = max(1, cpus // len(gpus))
        return [
            WorkerPlan(f"gpu-{gpu}", share, {"CPU": float(share), "GPU": 1.0},
                       {"CUDA_VISIBLE_DEVICES": gpu})
            for gpu in gpus
        ]
    count = n_workers or max(1, cpus // threads_per_worker)
    return [
        WorkerPlan(f"cpu-{i}", threads_per_worker, {"CPU": float(threads_per_worker)})
        for i in range(count)
    ]
