"""Starting or joining the Dask cluster airflowless runs on.

>>> import airflowless
>>> client = airflowless.init()          # embedded cluster, one worker process per core
>>> client.submit(sum, [1, 2]).result()
3
>>> airflowless.shutdown()

With an address (or ``AIRFLOWLESS_ADDRESS``) :func:`init` connects to a running
scheduler instead. Kept light: nothing here imports the store, torch, xgboost
or lightgbm, so a cold start costs what Dask's own start costs.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._cloudpickle_internals import keep_code_filenames
from .._dask_internals import quiet_cancelled_waits
from .._library_internals import bokeh_close_after_keep_alive
from ..errors import ClusterError, ConfigError
from ..private import secure_roots
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
    tls: Any | None = None  # the TLS files in use, and the Dask config to undo at shutdown


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
    host: str = "127.0.0.1",
    quiet: bool = False,
    cluster: Any | None = None,
    security: Any | None = None,
) -> Client:
    """Start an embedded cluster or connect to one; return its ``distributed.Client``.

    Idempotent: a second call returns the same client. ``address`` (or
    ``AIRFLOWLESS_ADDRESS``) connects to a running scheduler; otherwise an
    embedded cluster of worker processes is started on 127.0.0.1 — one per core,
    each declaring ``CPU`` resources, or one per GPU declaring ``GPU=1`` with
    ``CUDA_VISIBLE_DEVICES`` pinned. The airflowless worker plugin is installed
    either way, and the dashboard link is printed unless ``quiet``.

    Every port of the embedded cluster (scheduler, workers, dashboard) binds
    ``host``, 127.0.0.1 by default; a ``dashboard_address`` without a host
    (``":8787"``, ``":0"``) binds there too, and a taken port becomes a free
    one. Binding wider is explicit: ``host="0.0.0.0"`` or
    ``dashboard_address="0.0.0.0:8787"``. Workers are ``python -m`` processes
    that never import your script, so a script needs no ``__main__`` guard.

    ``cluster`` connects to any ``distributed`` Cluster object you made
    (``LocalCluster``, dask-jobqueue's ``SLURMCluster``, dask-kubernetes'
    ``KubeCluster``); its workers that declare no resources get ``CPU``,
    ``GPU`` and ``MEMORY`` from what they run with, and
    ``airflowless.runtime.adaptive.adapt(cluster, minimum, maximum)`` scales
    it for what airflowless waits for. :func:`shutdown` leaves it running.

    ``security`` turns on TLS (:mod:`airflowless.runtime.tls`): ``True``
    generates a CA and certificates for this embedded cluster; a folder of
    certificates, a ``TLSFiles`` or a ``distributed.security.Security`` uses
    yours. Every port then speaks TLS and requires a certificate from the
    cluster's CA: ``tls://`` comms, the dashboard over HTTPS, serve's data
    plane and HTTP ingress. To join a ``tls://`` scheduler, pass the folder
    given to drivers, or set ``AIRFLOWLESS_TLS_DIR`` (or ``AIRFLOWLESS_TLS_CA``,
    ``_CERT``, ``_KEY``).
    """
    global _runtime
    keep_code_filenames()  # tracebacks from workers name the user's files, whatever cloudpickle does
    quiet_cancelled_waits()  # the embedded scheduler: a Ctrl-C's cancelled waits are not errors
    bokeh_close_after_keep_alive()  # its dashboard: a tab closed mid-update is no traceback in the console
    secure_roots()  # the record, outputs and checkpoints are this user's alone (airflowless.private)
    if cluster is not None and not hasattr(cluster, "scheduler_address"):
        raise ConfigError(f"init(cluster=...) expects a distributed Cluster object (LocalCluster, "
                          f"SLURMCluster, KubeCluster, ...), got {type(cluster).__name__}; pass an address "
                          "string as init(address) instead")
    with _lock:
        if _live(_runtime):
            assert _runtime is not None
            if cluster is not None and address is None:
                address = _address_of(cluster)
            if address is not None and address != _runtime.address:
                where = _runtime.address or "an embedded cluster"
                raise ConfigError(
                    f"airflowless is already connected to {where}; call airflowless.shutdown() "
                    f"before connecting to {address}"
                )
            if security not in (None, False) and _runtime.tls is None:
                raise ConfigError("airflowless is already running without TLS; call airflowless.shutdown() "
                                  "before init(security=...)")
            return _runtime.client
        if cluster is not None and address is not None:
            raise ConfigError(f"init() takes a cluster or an address, got both (address={address!r}); "
                              "pass only one")
        if n_workers is not None and n_workers < 1:
            raise ConfigError(f"n_workers must be at least 1, got {n_workers}")
        if threads_per_worker < 1:
            raise ConfigError(f"threads_per_worker must be at least 1, got {threads_per_worker}")
        settings = get_settings()
        address = address or settings.address
        tls_files = _tls_files(security, settings, joining=bool(address or cluster is not None))
        if cluster is not None:  # the user's cluster: theirs to close, not shutdown()'s
            client, address, cluster = _attach(cluster), _address_of(cluster), None
        elif address:
            client, cluster = _connect(address, tls_files), None
        else:
            plans = plan_workers(
                gpus=detect_gpus(settings.cuda_visible_devices),
                n_workers=n_workers, threads_per_worker=threads_per_worker,
            )
            cluster = _start_local(plans, host=host, memory_limit=memory_limit,
                                   dashboard_address=dashboard_address, tls_files=tls_files)
            from distributed import Client

            client = Client(cluster, set_as_default=True)
            atexit.unregister(shutdown)
            atexit.register(shutdown)  # after distributed's own exit hooks, so it runs before them
        _install_plugins(client)
        _runtime = _Runtime(client=client, cluster=cluster, address=address or None, tls=tls_files)
        control = _install_control_plane(cluster)
        if not quiet:
            where = "embedded cluster" if cluster is not None else f"cluster at {address}"
            workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
            print(f"airflowless: {where}, {workers} workers, dashboard {client.dashboard_link}",
                  file=sys.stderr)
            if control:
                print(control, file=sys.stderr)
        return client


def _attach(cluster: Any) -> Client:
    """A client of ``cluster`` (any ``distributed`` Cluster), with airflowless's resources and demand.

    Workers that declare no resources get ``CPU``/``GPU``/``MEMORY`` from what
    they run with (:mod:`airflowless.runtime.declare_resources`); the scheduler
    learns what airflowless waits for (:mod:`airflowless.runtime.adaptive`), so
    ``airflowless.runtime.adaptive.adapt(cluster, ...)`` grows it for ranks and trials.
    """
    from distributed import Client

    from .adaptive import DemandPlugin
    from .declare_resources import DeclareResources

    client = Client(cluster, set_as_default=True)
    client.register_plugin(DemandPlugin())
    client.register_plugin(DeclareResources())
    return client


def _address_of(cluster: Any) -> str:
    return str(cluster.scheduler_address)


def _tls_files(security: Any, settings: Any, *, joining: bool) -> Any:
    """``security`` (else the ``AIRFLOWLESS_TLS_*`` settings) as TLS files, with the dashboard's config set."""
    if security is None and not (settings.tls_dir or settings.tls_ca or settings.tls_cert or settings.tls_key):
        return None
    if security is True and joining:
        raise ConfigError("security=True generates certificates for an embedded cluster, but this joins a "
                          "running one; pass its certificates instead (security=FOLDER, or AIRFLOWLESS_TLS_DIR)")
    from . import tls

    files = tls.resolve(security) if security is not None else tls.from_settings(settings)
    return None if files is None else tls.DriverTLS(files, owned=security is True)


def _install_control_plane(cluster: Any) -> str | None:
    """Put the control plane (pages, API, metrics) on the embedded scheduler; the line that says where.

    The scheduler runs in this process, so its pages read the store this driver
    uses (AIRFLOWLESS_DB / AIRFLOWLESS_HOME as they are when a page is read).
    """
    scheduler = getattr(cluster, "scheduler", None)
    if scheduler is None or getattr(scheduler, "http_application", None) is None:
        return None
    try:
        from ..control import mount

        ctx = mount.install(scheduler, follow_settings=True)
    except Exception as exc:  # the cluster works without its pages: say why they are missing
        return f"airflowless: control plane not installed ({type(exc).__name__}: {exc})"
    if ctx is None:
        return None
    return f"airflowless: control plane {mount.link(scheduler)} (token in {ctx.token_hint})"


def _connect(address: str, tls_files: Any = None) -> Client:
    from distributed import Client

    security = tls_files.security if tls_files is not None else None
    if security is None:
        _check_reachable(address)
    try:
        return Client(address, timeout=10, set_as_default=True, security=security)
    except (OSError, TimeoutError) as exc:
        raise _unreachable(address, exc) from exc


def _unreachable(address: str, exc: BaseException) -> ClusterError:
    return ClusterError(
        f"cannot reach a Dask scheduler at {address!r} ({exc}); start one with "
        "`airflowless cluster up` or `dask scheduler`, or unset AIRFLOWLESS_ADDRESS "
        "to use an embedded cluster"
    )


def _check_reachable(address: str) -> None:
    """Fail at once on what Client would report late or raw: no TLS settings, a refused port."""
    import socket

    from distributed.comm import parse_address, parse_host_port
    from distributed.security import Security

    scheme, location = parse_address(address)
    if scheme == "tls" and Security().get_connection_args("client").get("ssl_context") is None:
        raise ClusterError(
            f"expected TLS settings to connect to {address!r}, got none; set AIRFLOWLESS_TLS_DIR to "
            "the cluster's certificates folder (ca.pem, client.pem, client-key.pem; `airflowless cluster "
            "up --tls` prints it), or AIRFLOWLESS_TLS_CA/_CERT/_KEY, or pass init(security=FOLDER)"
        )
    if scheme not in {"tcp", "tls"}:
        return
    try:
        host, port = parse_host_port(location)
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError as exc:
        raise _unreachable(address, exc) from exc
    except (OSError, ValueError):
        return  # slow or odd: let Client try, with its timeout


def _start_local(plans: list[WorkerPlan], *, host: str, memory_limit: Any,
                 dashboard_address: str | None, tls_files: Any = None) -> Any:
    """A ``SpecCluster``: the scheduler in this process, each worker a :class:`WorkerProcess`."""
    from distributed import Scheduler, SpecCluster

    from .worker_process import WorkerProcess

    workers = {
        plan.name: {"cls": WorkerProcess, "options": {
            "nthreads": plan.nthreads, "resources": plan.resources, "env": plan.env,
            "memory_limit": memory_limit, "host": host}}
        for plan in plans
    }
    scheduler = {"cls": Scheduler, "options": {
        "host": host, "port": 0, "protocol": "tcp://", "dashboard": dashboard_address is not None,
        "dashboard_address": _dashboard_address(dashboard_address, host)}}
    if tls_files is not None:  # every port on TLS, requiring the cluster's CA (airflowless.runtime.tls)
        tls_files.apply(scheduler["options"], [spec["options"] for spec in workers.values()])
    return SpecCluster(scheduler=scheduler, workers=workers, worker=workers[plans[0].name],
                       silence_logs=logging.WARN, name="airflowless",
                       security=tls_files.security if tls_files is not None else None)


def _dashboard_address(address: str | None, host: str) -> str | None:
    """``address`` with ``host`` where it names none (``":8787"`` binds no wider than the cluster).

    A port that is taken becomes ``0`` (a free one), so Dask does not warn
    before the dashboard line is printed.
    """
    if address is None:
        return None
    named, _, port_text = str(address).rpartition(":")
    if named:
        return str(address)
    port = int(port_text or 0)
    if port and not _port_free(host, port):
        port = 0
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _port_free(host: str, port: int) -> bool:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


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
    scheduler_log = logging.getLogger("distributed.scheduler")  # an embedded cluster's scheduler logs here
    scheduler_log.addFilter(_drop_shutdown_noise)
    try:
        with contextlib.suppress(Exception):
            runtime.client.close()  # first: its futures are released, no worker holds results we lose
        if runtime.cluster is not None:
            with contextlib.suppress(Exception):
                runtime.cluster.sync(_close_workers, runtime.cluster)  # while the scheduler listens
            with contextlib.suppress(Exception):
                runtime.cluster.close()
    finally:
        scheduler_log.removeFilter(_drop_shutdown_noise)
    if runtime.tls is not None:
        runtime.tls.close()


async def _close_workers(cluster: Any, drain_s: float = 2.0) -> None:
    """Let the scheduler forget the closed client's tasks (briefly), then close the workers.

    Results still held after that (a serve replica, a published dataset) go
    with the cluster; the scheduler's warning that they are lost and "will be
    recomputed elsewhere" is not true of a cluster shutting down, so it is
    dropped (:func:`_drop_shutdown_noise`).
    """
    import asyncio
    import time

    deadline = time.monotonic() + drain_s
    while cluster.scheduler.tasks and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.gather(*(worker.close() for worker in list(cluster.workers.values())))


_SHUTDOWN_NOISE = (
    "caused the cluster to lose already computed task",  # results go with the cluster: nothing is recomputed
    # a closing worker's client (a cancelled stage still cleaning up) was subscribed to a topic that
    # ranks on another worker still report to: the scheduler's CRITICAL traceback says only that
    "Closed comm %r while trying to write",
)


def _drop_shutdown_noise(record: Any) -> bool:
    """False for the scheduler's records that say nothing true of an embedded cluster shutting down."""
    return not any(text in str(record.msg) for text in _SHUTDOWN_NOISE)


def is_initialized() -> bool:
    return _live(_runtime)


def _worker_process() -> Any:
    """The Dask worker this process hosts (from any of its threads), or None on a driver."""
    from distributed import get_worker

    from .._dask_internals import sole_worker_in_process

    try:
        return get_worker()
    except ValueError:
        return sole_worker_in_process()


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
    return worker.client  # type: ignore[no-any-return]


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
