"""A real Dask cluster as background OS processes: one scheduler, N workers.

Used by ``airflowless cluster up/down`` and by integration tests. Each process
runs ``distributed.cli.dask_scheduler`` or ``distributed.cli.dask_worker`` (the
modules behind ``dask scheduler`` and ``dask worker``) through
:mod:`airflowless.runtime.launch` (``python -P -m``, the start folder last on
``sys.path``) in its own session, so its pid is also its process-group
id, and it outlives the Python process that started it. Output goes to
``scheduler.log`` and ``worker-<i>.log`` in the cluster's ``log_dir``.
With ``tls`` (a folder of certificates, :mod:`airflowless.runtime.tls`) every
process speaks ``tls://`` and serves its dashboard over HTTPS, requiring a
certificate from the cluster's CA; its Dask TLS config reaches it as
``DASK_DISTRIBUTED__...`` environment variables.

Workers keep Dask's nanny: it enforces ``memory_limit`` by restarting a worker
that exceeds it, brings back a worker whose task crashed the process, and makes
``Client.restart()`` work. The pid recorded for a worker is the ``dask worker``
launcher (the nanny), the leader of a process group that holds the nanny and
the worker process it runs. :func:`kill_worker` and :func:`stop_process_cluster`
signal the whole group, so a killed worker is gone for good: no nanny is left
to restart it and its connection to the scheduler closes, which removes it from
the scheduler at once.

>>> cluster = start_process_cluster(n_workers=2)            # doctest: +SKIP
>>> from distributed import Client                           # doctest: +SKIP
>>> Client(cluster.address).submit(sum, [1, 2]).result()     # doctest: +SKIP
3
>>> stop_process_cluster(cluster)                            # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflowless.errors import ClusterError, ConfigError
from airflowless.private import private_folder
from airflowless.runtime import launch
from airflowless.settings import get_settings

__all__ = [
    "ProcessCluster",
    "default_state_path",
    "is_alive",
    "kill_worker",
    "load_state",
    "save_state",
    "start_adaptive_cluster",
    "start_process_cluster",
    "stop_process_cluster",
]

_SCHEDULER_MODULE = "distributed.cli.dask_scheduler"
_CONTROL_PLANE_PRELOAD = "airflowless.dashboard"  # pages, API and /metrics on the scheduler's dashboard
_WORKER_MODULE = "distributed.cli.dask_worker"
_LOG_TAIL_LINES = 25
# Popen objects of the processes this Python process started, by pid, so that
# they are reaped (no zombies, no ResourceWarning) when they end.
_launched: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True, kw_only=True)
class ProcessCluster:
    """Where a cluster started by :func:`start_process_cluster` listens and which pids it has.

    ``scheduler_pid`` and each of ``worker_pids`` lead their own process group;
    killing that group takes the scheduler or the worker down.

    >>> c = ProcessCluster(address="tcp://127.0.0.1:8786", dashboard_link="http://127.0.0.1:8787/status",
    ...                    scheduler_pid=10, worker_pids=(11, 12), log_dir="/tmp/logs")
    >>> ProcessCluster.from_json(c.to_json()) == c
    True
    """

    address: str
    dashboard_link: str
    scheduler_pid: int
    worker_pids: tuple[int, ...]
    log_dir: str
    tls_dir: str | None = None  # the certificates, when the cluster runs on TLS
    adaptive: tuple[int, int] | None = None  # (minimum, maximum) workers of an adaptive cluster (no worker pids)
    service_pid: int | None = None  # the airflowless service started beside the scheduler (its own group)

    def to_json(self) -> str:
        """This cluster as a JSON object (the format of the state file)."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ProcessCluster:
        """The cluster that :meth:`to_json` wrote; :class:`ClusterError` if ``text`` is not one."""
        try:
            data = json.loads(text)
            return cls(
                address=str(data["address"]),
                dashboard_link=str(data["dashboard_link"]),
                scheduler_pid=int(data["scheduler_pid"]),
                worker_pids=tuple(int(pid) for pid in data["worker_pids"]),
                log_dir=str(data["log_dir"]),
                tls_dir=str(data["tls_dir"]) if data.get("tls_dir") else None,
                adaptive=_bounds(data.get("adaptive")),
                service_pid=int(data["service_pid"]) if data.get("service_pid") else None,
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise ClusterError(
                f"expected a cluster description as written by ProcessCluster.to_json, "
                f"got {text[:200]!r} ({exc}); delete the file or start the cluster again"
            ) from exc


def _bounds(value: Any) -> tuple[int, int] | None:
    """An adaptive cluster's ``[minimum, maximum]`` as written to the state file (None: not adaptive)."""
    if value is None:
        return None
    minimum, maximum = (int(n) for n in value)  # ValueError/TypeError when it is not two counts
    return minimum, maximum


def start_process_cluster(
    *,
    n_workers: int = 2,
    threads_per_worker: int = 1,
    resources: dict[str, float] | None = None,
    host: str = "127.0.0.1",
    scheduler_port: int = 0,
    dashboard_port: int | None = None,
    memory_limit: str = "auto",
    log_dir: str | Path | None = None,
    worker_name_prefix: str = "worker",
    timeout: float = 30.0,
    env: dict[str, str] | None = None,
    tls: str | Path | None = None,
) -> ProcessCluster:
    """Start a scheduler and ``n_workers`` single-process workers; return once all are connected.

    ``resources`` defaults to ``{"CPU": threads_per_worker}`` for every worker.
    Port ``0`` (scheduler) and ``None`` (dashboard) pick a free port. Workers are
    named ``<worker_name_prefix>-<i>``. ``env`` is added to this process's
    environment for the started processes. Logs go to ``log_dir`` (default: a
    new temporary folder). If the cluster is not up within ``timeout`` seconds,
    or a process exits, everything started is killed and :class:`ClusterError`
    is raised with the end of the logs.

    >>> cluster = start_process_cluster(n_workers=1, resources={"CPU": 1, "GPU": 1})  # doctest: +SKIP
    >>> cluster.address                                                               # doctest: +SKIP
    'tcp://127.0.0.1:40123'
    """
    resources = _validate(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        resources=resources,
        scheduler_port=scheduler_port,
        dashboard_port=dashboard_port,
        timeout=timeout,
    )
    deadline = time.monotonic() + timeout
    logs = _log_folder(log_dir)
    port, dport = _free_ports(host, scheduler_port or None, dashboard_port)
    address = f"{'tls' if tls else 'tcp'}://{_netloc(host, port)}"
    child_env = None if env is None else {**os.environ, **env}
    tls_files, scheduler_env, tls_flags = _tls_setup(tls, child_env)
    if tls_files is not None:
        child_env = _tls_env(tls_files, "worker", child_env)

    procs: dict[str, subprocess.Popen[bytes]] = {}
    procs["scheduler"] = _launch(
        [_SCHEDULER_MODULE,
         *_flags(host=host, port=port, dashboard_address=_netloc(host, dport), **tls_flags),
         "--preload", _CONTROL_PLANE_PRELOAD],
        logs / "scheduler.log",
        scheduler_env,
    )
    resource_arg = " ".join(f"{name}={amount:g}" for name, amount in resources.items())
    for i in range(n_workers):
        procs[f"worker-{i}"] = _launch(
            [
                _WORKER_MODULE,
                address,
                *_flags(
                    host=host,
                    nworkers=1,
                    nthreads=threads_per_worker,
                    resources=resource_arg,
                    name=f"{worker_name_prefix}-{i}",
                    memory_limit=memory_limit,
                    dashboard_address=_netloc(host, 0),
                    death_timeout=f"{max(timeout, 60.0):g}",
                    **({"preload": tls_flags["preload"]} if tls_flags else {}),
                ),
            ],
            logs / f"worker-{i}.log",
            child_env,
        )
    cluster = ProcessCluster(
        address=address,
        dashboard_link=f"{'https' if tls_files else 'http'}://{_netloc(host, dport)}/status",
        scheduler_pid=procs["scheduler"].pid,
        worker_pids=tuple(procs[f"worker-{i}"].pid for i in range(n_workers)),
        log_dir=str(logs),
        tls_dir=str(tls_files.directory) if tls_files is not None else None,
    )
    try:
        _wait_until_up(address, n_workers, procs, deadline,
                       security=tls_files.security() if tls_files is not None else None)
    except BaseException as exc:
        stop_process_cluster(cluster, timeout=5.0)
        if not isinstance(exc, Exception):
            raise
        raise ClusterError(
            f"expected a Dask cluster at {address} with {n_workers} worker(s) within {timeout:g} s, "
            f"got: {exc}; see the logs below (kept in {logs}), and raise timeout= on a slow machine"
            f"\n{_log_tails(logs)}"
        ) from exc
    return cluster


def start_adaptive_cluster(
    *,
    minimum: int,
    maximum: int,
    threads_per_worker: int = 1,
    resources: dict[str, float] | None = None,
    host: str = "127.0.0.1",
    scheduler_port: int = 0,
    dashboard_port: int | None = None,
    memory_limit: str = "auto",
    log_dir: str | Path | None = None,
    timeout: float = 30.0,
    env: dict[str, str] | None = None,
    tls: str | Path | None = None,
) -> ProcessCluster:
    """Start a scheduler that adds and retires its own worker processes between ``minimum`` and ``maximum``.

    One background process (:mod:`airflowless.runtime.adaptive_main`) holds the
    scheduler and its workers, scaled by :func:`airflowless.runtime.adaptive.adapt`
    (for what ranks, trials and stages wait for). Returns once ``minimum``
    workers are connected; ``worker_pids`` is empty (the workers come and go
    with that process, which :func:`stop_process_cluster` stops). ``tls`` (a
    folder of certificates) puts the scheduler, the workers it adds and the
    dashboards on TLS, as :func:`start_process_cluster` does.

    >>> cluster = start_adaptive_cluster(minimum=1, maximum=4)   # doctest: +SKIP
    """
    if isinstance(minimum, bool) or isinstance(maximum, bool) or not 0 <= minimum <= maximum or maximum < 1:
        raise ConfigError(f"expected 0 <= minimum <= maximum and maximum >= 1, got {minimum}:{maximum}; "
                          "pass e.g. --adapt 1:4")
    resources = _validate(n_workers=1, threads_per_worker=threads_per_worker, resources=resources,
                          scheduler_port=scheduler_port, dashboard_port=dashboard_port, timeout=timeout)
    deadline = time.monotonic() + timeout
    logs = _log_folder(log_dir)
    port, dport = _free_ports(host, scheduler_port or None, dashboard_port)
    tls_files = None
    if tls is not None:
        from airflowless.runtime import tls as tls_module

        tls_files = tls_module.load(tls)
    address = f"{'tls' if tls_files is not None else 'tcp'}://{_netloc(host, port)}"
    resource_arg = " ".join(f"{name}={amount:g}" for name, amount in resources.items())
    procs = {"scheduler": _launch(
        ["airflowless.runtime.adaptive_main",
         *_flags(host=host, port=port, dashboard_address=_netloc(host, dport), minimum=minimum,
                 maximum=maximum, nthreads=threads_per_worker, resources=resource_arg,
                 memory_limit=memory_limit, **({"tls": tls_files.directory} if tls_files is not None else {}))],
        logs / "scheduler.log", None if env is None else {**os.environ, **env})}
    cluster = ProcessCluster(address=address,
                             dashboard_link=f"{'https' if tls_files else 'http'}://{_netloc(host, dport)}/status",
                             scheduler_pid=procs["scheduler"].pid, worker_pids=(), log_dir=str(logs),
                             tls_dir=str(tls_files.directory) if tls_files is not None else None,
                             adaptive=(minimum, maximum))
    try:
        _wait_until_up(address, minimum, procs, deadline,
                       security=tls_files.security() if tls_files is not None else None)
    except BaseException as exc:
        stop_process_cluster(cluster, timeout=5.0)
        if not isinstance(exc, Exception):
            raise
        raise ClusterError(
            f"expected an adaptive Dask cluster at {address} with {minimum} worker(s) within {timeout:g} s, "
            f"got: {exc}; see the logs below (kept in {logs})\n{_log_tails(logs)}") from exc
    return cluster


def stop_process_cluster(cluster: ProcessCluster, *, timeout: float = 10.0) -> None:
    """Stop the workers and then the scheduler: SIGTERM, wait up to ``timeout``, then SIGKILL.

    Processes already gone are skipped; this never raises for them.
    """
    if cluster.service_pid is not None:  # first: it starts runs on the cluster (the runs it started go on)
        _signal_groups([cluster.service_pid], signal.SIGTERM)
        if not _wait_gone([cluster.service_pid], time.monotonic() + timeout / 2):
            _signal_groups([cluster.service_pid], signal.SIGKILL)
    groups = [*cluster.worker_pids, cluster.scheduler_pid]
    _signal_groups(cluster.worker_pids, signal.SIGTERM)
    # The scheduler closes last, so workers can say goodbye instead of reconnecting.
    _wait_gone(cluster.worker_pids, time.monotonic() + timeout / 2)
    _signal_groups([cluster.scheduler_pid], signal.SIGTERM)
    if _wait_gone(groups, time.monotonic() + timeout / 2):
        return
    _signal_groups(groups, signal.SIGKILL)
    _wait_gone(groups, time.monotonic() + 5.0)


def kill_worker(cluster: ProcessCluster, index: int) -> None:
    """SIGKILL worker ``index`` (its nanny and worker process) and wait until it is gone.

    The scheduler drops the worker as soon as its connection closes. For fault tests.
    """
    if not 0 <= index < len(cluster.worker_pids):
        raise ConfigError(
            f"expected a worker index in 0..{len(cluster.worker_pids) - 1}, got {index}; "
            "pick one of the cluster's workers"
        )
    pid = cluster.worker_pids[index]
    _signal_groups([pid], signal.SIGKILL)
    _wait_gone([pid], time.monotonic() + 5.0)


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie counts as dead)."""
    if pid <= 0:
        return False
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def connected_workers(cluster: ProcessCluster, *, timeout: float = 3.0) -> int | None:
    """How many workers ``cluster``'s scheduler has now, asked over its own comm (TLS when the cluster is);
    None when it does not answer within ``timeout`` seconds."""
    import asyncio

    from distributed import Client

    security = None
    if cluster.tls_dir is not None:
        from airflowless.runtime import tls

        security = tls.load(cluster.tls_dir).security()
    try:
        with Client(cluster.address, timeout=timeout, set_as_default=False, security=security) as client:
            return len(client.scheduler_info(n_workers=-1)["workers"])
    except (OSError, TimeoutError, asyncio.TimeoutError):
        return None


def default_state_path() -> Path:
    """Where ``airflowless cluster up`` records its cluster: ``$AIRFLOWLESS_HOME/cluster.json``."""
    return get_settings().home / "cluster.json"


def save_state(cluster: ProcessCluster, path: str | Path | None = None) -> Path:
    """Write ``cluster`` to ``path`` (default :func:`default_state_path`) atomically; return the path."""
    target = Path(path) if path is not None else default_state_path()
    private_folder(target.parent)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(cluster.to_json() + "\n")
    os.replace(tmp, target)
    return target


def load_state(path: str | Path | None = None) -> ProcessCluster | None:
    """The cluster recorded at ``path`` (default :func:`default_state_path`), or ``None`` if there is none."""
    source = Path(path) if path is not None else default_state_path()
    try:
        text = source.read_text()
    except FileNotFoundError:
        return None
    return ProcessCluster.from_json(text)


def _validate(
    *,
    n_workers: int,
    threads_per_worker: int,
    resources: dict[str, float] | None,
    scheduler_port: int,
    dashboard_port: int | None,
    timeout: float,
) -> dict[str, float]:
    for name, value in (("n_workers", n_workers), ("threads_per_worker", threads_per_worker)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"expected {name} to be an integer >= 1, got {value!r}; pass a positive count"
            )
    for name, port in (("scheduler_port", scheduler_port), ("dashboard_port", dashboard_port)):
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535
        ):
            raise ConfigError(
                f"expected {name} in 0..65535, got {port!r}; use 0 to pick a free port"
            )
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"expected timeout to be a number of seconds > 0, got {timeout!r}")
    if resources is None:
        return {"CPU": float(threads_per_worker)}
    checked: dict[str, float] = {}
    for key, amount in resources.items():
        if not isinstance(key, str) or not key or any(c in key for c in "=, \t"):
            raise ConfigError(
                f"expected resource names without spaces, '=' or ',', got {key!r}; rename the resource"
            )
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            raise ConfigError(f"expected resource {key!r} to be a number >= 0, got {amount!r}")
        checked[key] = float(amount)
    return checked


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _free_ports(host: str, *wanted: int | None) -> list[int]:
    """``wanted`` with each ``None`` replaced by a distinct port that is free now on ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with ExitStack() as stack:
        ports = []
        for port in wanted:
            if port is None:
                sock = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            ports.append(port)
        return ports


def _log_folder(log_dir: str | Path | None) -> Path:
    """``log_dir`` (made if missing), or a new temporary folder."""
    if log_dir is None:
        return Path(tempfile.mkdtemp(prefix="airflowless-cluster-"))  # 0700
    return private_folder(log_dir)


def start_service(cluster: ProcessCluster, *, db: str | None = None) -> ProcessCluster:
    """Start ``airflowless service start`` beside ``cluster`` (its drivers join it); the cluster with its pid.

    :class:`ClusterError` with the end of its log if it exits at once (another service on a SQLite record).
    """
    import dataclasses
    import sys

    env = dict(os.environ)
    env["AIRFLOWLESS_ADDRESS"] = cluster.address
    if cluster.tls_dir:
        env["AIRFLOWLESS_TLS_DIR"] = cluster.tls_dir
    args = [sys.executable, "-m", "airflowless.cli", "service", "start", "--address", cluster.address]
    if db:
        args += ["--db", db]
    log_path = Path(cluster.log_dir) / "service.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    _launched[proc.pid] = proc
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:  # up once it says so; gone if it refused to start
        if proc.poll() is not None:
            raise ClusterError(f"the service did not start:\n{log_path.read_text(errors='replace')[-2000:]}")
        if "running on the record" in log_path.read_text(errors="replace"):
            break
        time.sleep(0.1)
    return dataclasses.replace(cluster, service_pid=proc.pid)


def _flags(**options: object) -> list[str]:
    """``--some-option value`` pairs for a Dask command line."""
    return [
        arg for key, value in options.items() for arg in (f"--{key.replace('_', '-')}", str(value))
    ]


def _launch(
    args: Sequence[str], log_path: Path, env: dict[str, str] | None
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            launch.command(*args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    _launched[proc.pid] = proc
    return proc


def _tls_setup(
    tls: str | Path | None, env: dict[str, str] | None
) -> tuple[Any, dict[str, str] | None, dict[str, str]]:
    """The certificates, the scheduler's environment and the extra scheduler flags for ``tls``."""
    if tls is None:
        return None, env, {}
    from airflowless.runtime import tls as tls_module

    files = tls_module.load(tls)
    return files, _tls_env(files, "scheduler", env), {"protocol": "tls", "preload": tls_module.__name__}


def _tls_env(files: Any, role: str, env: dict[str, str] | None) -> dict[str, str]:
    """``env`` (default this process's) plus the Dask TLS config of ``role`` as ``DASK_*`` variables."""
    from airflowless.runtime import tls as tls_module

    return {**(env if env is not None else os.environ), **tls_module.dask_environ(files, role)}


def _wait_until_up(
    address: str, n_workers: int, procs: dict[str, subprocess.Popen[bytes]], deadline: float,
    security: Any = None,
) -> None:
    """Return once the scheduler has ``n_workers`` workers; raise if a process exits or time is up."""
    import asyncio

    from distributed import Client

    def check_running() -> float:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise ClusterError(f"the {name} process exited with code {proc.returncode}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        return remaining

    client = None
    try:
        while client is None:
            with suppress(OSError):  # the scheduler is not listening yet
                client = Client(address, timeout=min(2.0, check_running()), set_as_default=False,
                                security=security)
        while n_workers > 0:  # 0: an adaptive cluster that starts empty
            try:
                client.wait_for_workers(n_workers, timeout=min(1.0, check_running()))
                return
            except (TimeoutError, asyncio.TimeoutError):
                pass
    finally:
        if client is not None:
            client.close()


def _log_tails(log_dir: Path) -> str:
    parts = []
    for log in sorted(log_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        parts.append(f"--- {log.name} (last {len(lines)} lines) ---\n" + "\n".join(lines))
    return "\n".join(parts)


def _signal_groups(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        if pid > 0 and _is_ours(pid):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)


def _wait_gone(pids: Sequence[int], deadline: float) -> bool:
    """Wait until every process group in ``pids`` is empty; whether that happened by ``deadline``."""
    while True:
        alive = [pid for pid in pids if _group_alive(pid)]
        if not alive:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    if is_alive(pgid):
        return True
    try:  # the leader is gone; its children (the worker behind a nanny) may linger
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _is_ours(pid: int) -> bool:
    """Whether ``pid`` is a live Dask process (or the service), not a stranger that reused a stale pid."""
    if not is_alive(pid):
        return _group_alive(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:  # no /proc (macOS): trust the recorded pid
        return not Path("/proc/self").exists()
    except OSError:
        return False
    return (b"distributed" in cmdline or b"dask" in cmdline or b"airflowless.runtime.adaptive_main" in cmdline
            or b"airflowless.cli\x00service\x00start" in cmdline)


def _reap(pid: int) -> None:
    proc = _launched.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            del _launched[pid]
        return
    with suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]
