"""``airflowless serve``: serve an application from a module, list what is served, stop it.

``serve run`` is a long-lived process: it starts (or joins) the cluster, runs
the application, prints where it listens and blocks until SIGINT or SIGTERM,
then shuts serve down. ``serve status`` and ``serve shutdown`` work from the
store's ``deployments`` rows, which record the serving process's pid and host.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime
from types import ModuleType
from typing import Any

import click

from ..errors import AirflowlessError, ConfigError
from ..store.liveness import alive_since


@click.group()
def serve() -> None:
    """Serve an application over HTTP, and see or stop the ones recorded in the store."""


@serve.command("run")
@click.argument("target", metavar="MODULE_OR_PATH[:APP]")
@click.option("--name", default="default", show_default=True, help="The application's name.")
@click.option("--route-prefix", default="/", show_default=True, help="The URL prefix it is served under.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface of the HTTP proxy; the default keeps it private to this machine.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port of the HTTP proxy (0: a free one).")
@click.option("--address", metavar="ADDRESS", default=None,
              help="Scheduler to run on (default: AIRFLOWLESS_ADDRESS, else the cluster of "
                   "`airflowless cluster up`, else an embedded cluster).")
def run_app(target: str, name: str, route_prefix: str, host: str, port: int, address: str | None) -> None:
    """Serve the Application APP (an object made by Model.bind(...)) until Ctrl+C or SIGTERM.

    \b
    airflowless serve run apps/taxi.py:app --port 8000
    curl -X POST 127.0.0.1:8000/ -H 'Content-Type: application/json' -d '{"x": 1}'
    """
    from .. import serve as serve_api
    from ..runtime import init, shutdown
    from .run import _background_cluster

    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        app = load_application(target)
        init(address or _background_cluster())
        if not stop.is_set():
            serve_api.start(http_options={"host": host, "port": port})
            serve_api.run(app, name=name, route_prefix=route_prefix)
            _print_routes(serve_api.http_address(), name, route_prefix, app)
        while not stop.wait(0.5):
            pass
        click.echo("stopping", err=True)
    except AirflowlessError as exc:
        click.echo(f"error: {exc}", err=True)
        code = 2
    finally:
        serve_api.shutdown()
        shutdown()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    sys.exit(code)


def load_application(target: str) -> Any:
    """The Application named by ``MODULE_OR_PATH[:APP]`` (APP may be dotted: ``apps:builders.taxi``)."""
    from ..dag.loader import load_module
    from ..serve import Application, Deployment

    module_part, sep, attr = target.rpartition(":")
    if not sep:
        module_part, attr = target, ""
    module = load_module(module_part)
    _ship_by_value(module)
    found = sorted(n for n, v in vars(module).items() if isinstance(v, Application))
    if not attr:
        if len(found) != 1:
            raise ConfigError(f"{module_part!r} defines {len(found) or 'no'} Application(s) {found or ''}; "
                              f"name one with {module_part}:APP (an object built by SomeDeployment.bind(...))")
        attr = found[0]
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ConfigError(f"{module_part!r} has no attribute {attr!r}; its Applications are {found}")
        value = getattr(value, part)
    if isinstance(value, Deployment):
        raise ConfigError(f"{attr!r} in {module_part!r} is a deployment, not an Application; bind it first, "
                          f"e.g. app = {attr}.bind(), and serve {module_part}:app")
    if not isinstance(value, Application):
        raise ConfigError(f"{attr!r} in {module_part!r} is a {type(value).__name__}, not an Application "
                          "(build one with SomeDeployment.bind(...))")
    return value


def _ship_by_value(module: ModuleType) -> None:
    """User code outside installed packages goes to the workers by value, so they need no copy of it."""
    import cloudpickle

    path = getattr(module, "__file__", None) or ""
    if module.__name__ == "__main__" or "site-packages" in path or \
            module.__name__.split(".")[0] in {"airflowless", "connectors"}:
        return
    cloudpickle.register_pickle_by_value(module)


def _print_routes(url: str, name: str, route_prefix: str, app: Any) -> None:
    base = url + ("" if route_prefix == "/" else route_prefix)
    click.echo(f"serving application {name!r} at {base or url}/")
    for path, route in sorted(app.deployment.http_routes.items()):
        click.echo(f"  POST {base}/{path}   -> {app.deployment.name}.{route.method}(body)")
    click.echo(f"  GET  {url}/-/healthz   GET {url}/-/routes")
    click.echo("press Ctrl+C to stop")


@serve.command("status")
@click.option("--all", "show_all", is_flag=True, help="Also deployments that are no longer running.")
@click.option("--limit", default=50, show_default=True, help="How many of the latest rows.")
@click.option("--timeout", default=1.0, show_default=True, help="Seconds to wait for each proxy's health check.")
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
def status(show_all: bool, limit: int, timeout: float, db: str | None) -> None:
    """The deployments in the store, each proxy checked live (GET /-/healthz)."""
    from rich.table import Table

    from .render import _console, _status
    from .runs import _open

    store = _open(db)
    rows = store.list_deployments(status=None if show_all else "running", limit=limit)
    store.close()
    if not rows:
        click.echo("no deployments are running" if not show_all else "no deployments are recorded")
        return
    live = {r["http_address"]: _reachable(r["http_address"], timeout)
            for r in rows if r["status"] == "running" and r["http_address"]}
    here = socket.gethostname()
    table = Table(title="deployments", title_justify="left")
    for column in ("app", "deployment", "route", "address", "replicas", "status", "http", "process", "since"):
        table.add_column(column, overflow="fold")
    for r in rows:
        http = ("reachable" if live.get(r["http_address"]) else "[red]unreachable[/red]") \
            if r["status"] == "running" else ""
        table.add_row(r["app"], r["deployment"], r["route_prefix"] or "(handles only)", r["http_address"] or "",
                      str(r["num_replicas"]), _status(r["status"]), http, _process(r, here),
                      r["updated_at"].strftime("%Y-%m-%d %H:%M:%S"))
    _console().print(table)


def _reachable(address: str, timeout: float) -> bool:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an HTTP proxy
    try:
        with opener.open(f"{address}/-/healthz", timeout=timeout) as reply:
            return bool(reply.status == 200)
    except Exception:
        return False


def _process(row: dict[str, Any], here: str) -> str:
    if row["hostname"] != here:
        return f"{row['pid']} on {row['hostname']}"
    if row["status"] != "running":
        return str(row["pid"])
    return f"{row['pid']} alive" if alive_since(row["pid"], row["created_at"]) else f"{row['pid']} gone"


def _serve_run_command(argv: list[str]) -> bool:
    """Whether ``argv`` runs ``airflowless ... serve run`` (the console script or ``python -m airflowless.cli``)."""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == "airflowless":
            rest = argv[i + 1:]
        elif arg == "-m" and argv[i + 1:i + 2] in (["airflowless"], ["airflowless.cli"]):
            rest = argv[i + 2:]
        else:
            continue
        return any(rest[j:j + 2] == ["serve", "run"] for j in range(len(rest)))
    return False


def _ours(pid: int) -> str | None:
    """Why live process ``pid`` must not be signalled, or ``None`` if it is our ``serve run`` process.

    Ours: run by this user, with the command line ``airflowless serve run`` (the
    caller has checked it is alive and started before its row was written). A
    row in a shared store names the pid, so the process must prove the rest.
    """
    import psutil

    try:
        process = psutil.Process(pid)
        if process.uids().real != os.getuid():
            return "it belongs to another user"
        argv = process.cmdline()
    except psutil.Error as exc:
        return f"it cannot be inspected ({type(exc).__name__})"
    if not _serve_run_command(argv):
        return f"its command line is {' '.join(argv)[:200]!r}, not `airflowless serve run`"
    return None


def _stop_orphans(address: str | None, owners: list[str]) -> None:
    """Stop, on the cluster's workers, the replicas that controllers ``owners`` left running."""
    from distributed import Client

    from ..serve.replica import stop_replicas
    from ..settings import get_settings
    from .run import _background_cluster

    lease = get_settings().serve_lease_s
    address = address or get_settings().address or _background_cluster()
    if address is None:
        click.echo(f"no cluster to reach (pass --address): their replicas stop by themselves within {lease:g} s "
                   "once their controller is gone")
        return
    try:
        with Client(address, timeout=10, set_as_default=False) as client:
            stopped = client.run(stop_replicas, owners, on_error="return")
    except (OSError, TimeoutError) as exc:
        click.echo(f"cannot reach the cluster at {address} ({exc}); their replicas stop by themselves within "
                   f"{lease:g} s once their controller is gone", err=True)
        return
    count = sum(len(ids) for ids in stopped.values() if isinstance(ids, list))
    click.echo(f"stopped {count} replica(s) left running on {address} by process(es) that are gone")


@serve.command("shutdown")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for the processes to exit.")
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--address", metavar="ADDRESS", default=None,
              help="Scheduler whose workers host replicas of serving processes that are gone (default: "
                   "AIRFLOWLESS_ADDRESS, else the cluster of `airflowless cluster up`).")
def shutdown_cmd(timeout: float, db: str | None, address: str | None) -> None:
    """Stop the `airflowless serve run` processes of this machine recorded as running, and mark them stopped.

    \b
    Each process gets SIGTERM only once it proves it is one (this user's, started
    before its row, command line `airflowless serve run`); other pids in the store
    are left alone. Replicas of a serving process that is gone (killed) are stopped
    on the cluster's workers.
    """
    from .runs import _open

    store = _open(db)
    here = socket.gethostname()
    rows = [r for r in store.list_deployments(status="running", limit=100_000) if r["hostname"] == here]
    if not rows:
        click.echo("no running deployments are recorded on this machine")
        store.close()
        return
    apps: dict[int, set[str]] = {}
    started: dict[int, datetime] = {}
    for r in rows:
        apps.setdefault(r["pid"], set()).add(r["app"])
        started[r["pid"]] = min(started.get(r["pid"], r["created_at"]), r["created_at"])
    signalled, gone, refused = [], [], {}
    for pid in sorted(apps):
        names = ", ".join(sorted(apps[pid]))
        if pid == os.getpid() or not alive_since(pid, started[pid]):
            gone.append(pid)
            click.echo(f"process {pid} (serving {names}) is gone; marking it stopped")
        elif (why := _ours(pid)) is not None:
            refused[pid] = why
            click.echo(f"process {pid} (serving {names}) was not signalled: {why}", err=True)
        else:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
            click.echo(f"sent SIGTERM to process {pid} (serving {names})")
    deadline = time.monotonic() + timeout
    alive = set(signalled)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if alive_since(pid, started[pid])}
        time.sleep(0.1)
    for pid, served in apps.items():
        if pid not in alive and pid not in refused:
            for app in served:
                store.update_deployment_status(app, "stopped", pid=pid, hostname=here)
    store.close()
    if gone:
        _stop_orphans(address, [f"{here}:{pid}" for pid in gone])
    if alive:
        click.echo(f"error: process(es) {sorted(alive)} still run after {timeout:g} s; "
                   f"stop them with kill {' '.join(map(str, sorted(alive)))}", err=True)
    if refused:
        click.echo(f"error: process(es) {sorted(refused)} are recorded as serving but are not this user's "
                   "`airflowless serve run`; stop serve inside them with serve.shutdown(), or remove "
                   "their rows", err=True)
    if alive or refused:
        sys.exit(1)
    click.echo(f"stopped {len(signalled)} serving process(es)")
