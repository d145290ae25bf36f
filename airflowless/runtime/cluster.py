"""Starting or joining the Dask cluster airflowless runs on.

>>> import airflowless
>>> client = airflowless.init()          # embedded LocalCluster, one worker per core
>>> client.submit(sum, [1, 2]).result()
3
>>> airflowless.shutdown()

With an address (or ``AIRFLOWLESS_ADDRESS``) :func:`init` connects to a running
scheduler instead. Kept light: nothing here imports the store, torch, xgboost
or lightgbm, so a cold start costs what Dask's own start costs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError, ConfigError
from ..settings import get_settings
from .resources import WorkerPlan, detect_gpus, plan_workers

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["init", "shutdown", "get_client", "is_initialized", "cluster_client"]


@dataclass
class _Runtime:
    client: Client
    cluster: Any | None  # the embedded cluster we own, if any
    address: str | None  # the address asked for, None for the embedded cluster


_lock = threading.RLock()
_runtime: _Runtime | None = None


def _live(runtime: _Runtime | None) -> bool:
    return runtime is not None and runtime.client.status in {"running", "connecting", "newly-created"}


def init(
    address: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | float | None = "auto",
    dashboard_address: str | None = ":8787",
    quiet: bool = False,
) -> Client:
    """Start an embedded cluster or connect to one; return its ``distributed.Client``.

    Idempotent: a second call returns the same client. ``address`` (or
    ``AIRFLOWLESS_ADDRESS``) connects to a running scheduler; otherwise a
    ``LocalCluster`` of worker processes is started on 127.0.0.1 — one per core,
    each declaring ``CPU`` resources, or one per GPU declaring ``GPU=1`` with
    ``CUDA_VISIBLE_DEVICES`` pinned. The airflowless worker plugin is installed
    either way, and the dashboard link is printed unless ``quiet``.
    """
    global _runtime
    with _lock:
        if _live(_runtime):
            assert _runtime is not None
            if address is not None and address != _runtime.address:
                where = _runtime.address or "an embedded cluster"
                raise ConfigError(
                    f"airflowless is already connected to {where}; call airflowless.shutdown() "
                    f"before connecting to {address}"
                )
            return _runtime.client
        if n_workers is not None and n_workers < 1:
            raise ConfigError(f"n_workers must be at least 1, got {n_workers}")
        if threads_per_worker < 1:
            raise ConfigError(f"threads_per_worker must be at least 1, got {threads_per_worker}")
        settings = get_settings()
        address = address or settings.address
        if address:
            client, cluster = _connect(address), None
        else:
            plans = plan_workers(
                gpus=detect_gpus(settings.cuda_visible_devices),
                n_workers=n_workers, threads_per_worker=threads_per_worker,
            )
            cluster = _start_local(plans, memory_limit=memory_limit,
                                   dashboard_address=dashboard_address)
            from distributed import Client

            client = Client(cluster, set_as_default=True)
        _install_plugins(client)
        _runtime = _Runtime(client=client, cluster=cluster, address=address or None)
        if not quiet:
            where = "embedded cluster" if cluster is not None else f"cluster at {address}"
            workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
            print(f"airflowless: {where}, {workers} workers, dashboard {client.dashboard_link}",
                  file=sys.stderr)
        return client


def _connect(address: str) -> Client:
    from distributed import Client

    try:
        return Client(address, timeout=10, set_as_default=True)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach a Dask scheduler at {address!r} ({exc}); start one with "
            "`airflowless cluster up` or `dask scheduler`, or unset AIRFLOWLESS_ADDRESS "
            "to use an embedded cluster"
        ) from exc


def _start_local(plans: list[WorkerPlan], *, memory_limit: Any, dashboard_address: str | None) -> Any:
    from distributed import LocalCluster, Nanny

    first = plans[0]
    uniform = all(p.nthreads == first.nthreads and p.resources == first.resources and not p.env
                  for p in plans)
    cluster = LocalCluster(
        n_workers=len(plans) if uniform else 0,
        threads_per_worker=first.nthreads,
        processes=True,
        host="127.0.0.1",
        dashboard_address=dashboard_address,
        memory_limit=memory_limit,
        resources=first.resources,
    )
    if not uniform:  # GPU workers: each its own env and resources
        base = cluster.new_worker_spec()
        options = next(iter(base.values()))["options"]
        for plan in plans:
            cluster.worker_spec[plan.name] = {
                "cls": Nanny,
                "options": {**options, "nthreads": plan.nthreads, "resources": plan.resources,
                            "env": plan.env, "name": plan.name},
            }
        cluster.sync(cluster._correct_state)
    return cluster


def _install_plugins(client: Client) -> None:
    from .plugins import AirflowlessWorkerPlugin

    client.register_plugin(AirflowlessWorkerPlugin())


def shutdown() -> None:
    """Close the client, and the embedded cluster if :func:`init` started one."""
    global _runtime
    with _lock:
        runtime, _runtime = _runtime, None
    if runtime is None:
        return
    with contextlib.suppress(Exception):
        runtime.client.close()
    if runtime.cluster is not None:
        with contextlib.suppress(Exception):
            runtime.cluster.close()


def is_initialized() -> bool:
    return _live(_runtime)


def _worker_process() -> Any:
    """The Dask worker this process hosts (from any of its threads), or None on a driver."""
    from distributed import Worker, get_worker

    try:
        return get_worker()
    except ValueError:
        workers = list(Worker._instances)
        return workers[0] if len(workers) == 1 else None


def _in_task() -> bool:
    from distributed import get_worker

    try:
        get_worker()
        return True
    except ValueError:
        return False


def get_client() -> Client:
    """The client to use here: the worker's own client in a worker process (a task, or a thread a
    task started, like a Tune trial's driver), else :func:`init`'s."""
    worker = _worker_process()
    if worker is None:
        return init(quiet=True)
    return worker._get_client()  # type: ignore[no-any-return]


@contextlib.contextmanager
def cluster_client() -> Iterator[Client]:
    """A client for launching cluster work; inside a task it secedes the task's thread.

    Stage code that drives other cluster work uses this so it does not hold a
    worker thread while it waits.
    """
    from distributed import worker_client

    if _in_task():
        with worker_client() as client:
            yield client
        return
    yield get_client()
