"""The airflowless worker plugin, installed on every worker by :func:`airflowless.init`.

Lifecycle (see ``distributed.diagnostics.plugin.WorkerPlugin``): ``setup`` runs
when the plugin is registered on a worker (and on every worker that joins
later), ``teardown`` when the worker closes. The plugin is the worker-side home
of airflowless state: objects that live as long as the worker (train ranks,
serve replicas and model caches join here) are kept in :attr:`state`, and
closed with the worker.
"""

from __future__ import annotations

import contextlib
from typing import Any

from distributed import WorkerPlugin

from ..errors import ClusterError

__all__ = ["AirflowlessWorkerPlugin", "PLUGIN_NAME", "worker_state"]

PLUGIN_NAME = "airflowless"


class AirflowlessWorkerPlugin(WorkerPlugin):
    """Holds per-worker airflowless state; closes it when the worker closes."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.worker: Any = None

    def setup(self, worker: Any) -> None:
        import os

        from .._cloudpickle_internals import keep_code_filenames
        from .._dask_internals import quiet_cancelled_waits, quiet_compute_failed

        self.worker = worker
        self.state = {}
        keep_code_filenames()  # what this worker ships (a trial's ranks, a stage's tasks) names its files
        quiet_compute_failed(("StageFailedError(", "StageSkipped("))  # the driver tells a stage's failure, once
        quiet_cancelled_waits()
        # Blocks arrive from other workers in buffers pyarrow's Acero engine may find
        # unaligned; let it copy them rather than warn on every groupby or join.
        os.environ.setdefault("ACERO_ALIGNMENT_HANDLING", "reallocate")

    def teardown(self, worker: Any) -> None:
        for value in list(self.state.values()):
            close = getattr(value, "close", None)
            if callable(close):
                with contextlib.suppress(Exception):  # a worker must still close
                    close()
        self.state.clear()


def worker_state() -> dict[str, Any]:
    """The per-worker state dict, from inside a task running on an airflowless worker."""
    from distributed import get_worker

    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        raise ClusterError(
            "this worker has no airflowless plugin; connect with airflowless.init(address) "
            "so it is installed"
        )
    return plugin.state  # type: ignore[attr-defined,no-any-return]
