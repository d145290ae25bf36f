"""A worker plugin that gives a worker declaring no resources airflowless's ``CPU``/``GPU``/``MEMORY``.

Stages, ranks, trials and replicas ask Dask for resources (``{"CPU": 1}`` by
default); a worker started by a cluster manager (dask-jobqueue,
dask-kubernetes, a plain ``dask worker``) usually declares none, so nothing
could run there. :func:`airflowless.init` with ``cluster=`` or an address
installs this plugin: on every worker, now and joining later, that declares
no resources, ``setup`` declares what
:func:`~airflowless.runtime.resources.worker_resources` reads from the worker
(threads, memory limit, ``CUDA_VISIBLE_DEVICES``). Workers that declare
resources keep theirs.
"""

from __future__ import annotations

import os
from typing import Any

from distributed import WorkerPlugin

from .resources import worker_resources

__all__ = ["DeclareResources"]


class DeclareResources(WorkerPlugin):
    """Declares ``CPU``, ``GPU`` and ``MEMORY`` on workers that declare no resources."""

    name = "airflowless-resources"
    idempotent = True

    async def setup(self, worker: Any) -> None:
        if worker.state.total_resources:
            return
        await worker.set_resources(**worker_resources(
            nthreads=worker.state.nthreads, memory_limit=worker.memory_manager.memory_limit,
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES")))
