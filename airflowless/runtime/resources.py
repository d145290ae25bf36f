"""Planning the embedded cluster's workers: how many, with what resources.

Pure functions (no Dask, no processes) so the GPU placement can be tested on
a machine without GPUs.

>>> plan_workers(cpus=4, gpus=())
[WorkerPlan(name='cpu-0', nthreads=1, resources={'CPU': 1.0}, env={}), ...]

Workers of a cluster airflowless did not start (``init(cluster=...)``, a
``dask worker`` without ``--resources``) declare what :func:`worker_resources`
says from their threads, memory limit and visible GPUs; :func:`spec_resources`
reads the same from a cluster's worker spec, for adaptive scaling to know what
a new worker will bring.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["WorkerPlan", "plan_workers", "gpu_worker_threads", "detect_gpus", "worker_resources", "spec_resources"]


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
    and :func:`gpu_worker_threads` cores; the cores left over become CPU-only
    workers as above (with no GPU visible), so reading and transforming data
    for the GPUs runs in processes of its own, not under the trainer's GIL (a
    16-core, 1-GPU machine: one GPU worker of 4 threads and 12 single-thread
    CPU workers).

    >>> [(p.name, p.nthreads, p.resources) for p in plan_workers(cpus=4, gpus=("0",))]
    [('gpu-0', 1, {'CPU': 1.0, 'GPU': 1.0}), ('cpu-0', 1, {'CPU': 1.0}), ('cpu-1', 1, {'CPU': 1.0}), ('cpu-2', 1, {'CPU': 1.0})]
    """
    cpus = cpus or os.cpu_count() or 1
    plans = []
    if gpus:
        share = gpu_worker_threads(cpus, len(gpus))
        plans = [WorkerPlan(f"gpu-{gpu}", share, {"CPU": float(share), "GPU": 1.0}, {"CUDA_VISIBLE_DEVICES": gpu})
                 for gpu in gpus]
        cpus -= share * len(gpus)
        if cpus < threads_per_worker:
            return plans
    count = n_workers or max(1, cpus // threads_per_worker)
    hidden = {"CUDA_VISIBLE_DEVICES": ""} if gpus else {}  # no CUDA context where no GPU is declared
    return plans + [
        WorkerPlan(f"cpu-{i}", threads_per_worker, {"CPU": float(threads_per_worker)}, dict(hidden))
        for i in range(count)
    ]


def gpu_worker_threads(cpus: int, gpus: int) -> int:
    """Threads (and declared CPUs) of each GPU worker: a quarter of the cores per GPU, 1 to 4.

    Enough for a rank's training loop and its framework's host-side threads;
    the rest of the machine feeds it from CPU-only workers.

    >>> gpu_worker_threads(16, 1), gpu_worker_threads(2, 1), gpu_worker_threads(64, 8)
    (4, 1, 2)
    """
    return max(1, min(4, cpus // (4 * gpus)))


def worker_resources(*, nthreads: int, memory_limit: float | None,
                     cuda_visible_devices: str | None) -> dict[str, float]:
    """What a worker that declares nothing offers: ``CPU`` = threads, ``GPU`` = visible GPUs
    (only when ``CUDA_VISIBLE_DEVICES`` names some), ``MEMORY`` = its memory limit in bytes.

    >>> worker_resources(nthreads=2, memory_limit=4e9, cuda_visible_devices="0")
    {'CPU': 2.0, 'GPU': 1.0, 'MEMORY': 4000000000.0}
    """
    found = {"CPU": float(max(1, nthreads))}
    if cuda_visible_devices:
        gpus = detect_gpus(cuda_visible_devices)
        if gpus:
            found["GPU"] = float(len(gpus))
    if memory_limit:
        found["MEMORY"] = float(memory_limit)
    return found


def spec_resources(spec: dict[str, Any]) -> dict[str, float] | None:
    """The resources a worker started from a ``SpecCluster`` worker spec will declare, if known.

    Understands ``distributed`` workers and nannies (``nthreads``,
    ``memory_limit``, ``resources``, ``env``) and dask-jobqueue jobs (``cores``,
    ``memory`` and ``processes`` per job, ``--resources`` in
    ``worker_extra_args``). None when the spec says too little.

    >>> spec_resources({"cls": object, "options": {"cores": 2, "memory": "4GB", "processes": 1}})
    {'CPU': 2.0, 'MEMORY': 4000000000.0}
    """
    from dask.utils import parse_bytes

    options = spec.get("options") or {}
    declared = options.get("resources") or _resources_arg(options.get("worker_extra_args") or ())
    if declared:
        return {str(k): float(v) for k, v in declared.items()}
    processes = int(options.get("processes") or 1)
    threads = options.get("nthreads") or (int(options["cores"]) // processes if options.get("cores") else None)
    if not threads:
        return None
    memory = options.get("memory_limit") or options.get("memory")
    limit = None
    if isinstance(memory, (int, float)) and memory > 0:
        limit = float(memory)
    elif isinstance(memory, str) and memory != "auto":
        limit = float(parse_bytes(memory)) / (processes if "memory" in options else 1)
    env = options.get("env") or {}
    return worker_resources(nthreads=int(threads), memory_limit=limit,
                            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"))


def _resources_arg(args: Any) -> dict[str, float]:
    """``--resources "CPU=1 GPU=1"`` (or ``--resources=...``) in a worker's command-line arguments."""
    args = list(args)
    for i, arg in enumerate(args):
        text = args[i + 1] if arg == "--resources" and i + 1 < len(args) else (
            arg.split("=", 1)[1] if str(arg).startswith("--resources=") else None)
        if text is not None:
            pairs = (part.split("=", 1) for part in str(text).replace(",", " ").split() if "=" in part)
            return {name: float(amount) for name, amount in pairs}
    return {}
