"""``airflowless cluster``: a local scheduler and workers as background processes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click


@click.group()
def cluster() -> None:
    """Start, inspect and stop a background Dask cluster on this machine."""


@cluster.command("up")
@click.option("--workers", "-n", default=2, show_default=True, help="Worker processes to start.")
@click.option("--threads", default=1, show_default=True, help="Threads per worker.")
@click.option("--port", default=0, show_default=True, help="Scheduler port (0: a free one).")
@click.option("--dashboard-port", default=None, type=int, help="Dashboard port (default: a free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; the default keeps the cluster off other machines, but other users of "
                   "this one can still connect and run code as you: use --tls on a shared host "
                   "(docs/security.md).")
@click.option("--resources", default=None, metavar="NAME=AMOUNT[,...]",
              help="Resources each worker declares (default CPU=<threads>).")
@click.option("--tls", "use_tls", is_flag=True,
              help="Run every port on TLS with certificates generated into $AIRFLOWLESS_HOME/tls.")
@click.option("--tls-dir", default=None, type=click.Path(file_okay=False),
              help="Use the certificates in this folder (ca.pem, <role>.pem, <role>-key.pem); implies --tls.")
@click.option("--tls-host", "tls_hosts", multiple=True, metavar="NAME",
              help="Another host name or address the generated certificates should name (repeatable).")
@click.option("--adapt", default=None, metavar="MIN:MAX",
              help="Add and retire workers between MIN and MAX as ranks, trials and stages wait "
                   "(instead of --workers).")
@click.option("--no-service", is_flag=True,
              help="Do not start the airflowless service (which runs deployments and submissions) beside it.")
def up(workers: int, threads: int, port: int, dashboard_port: int | None, host: str,
       resources: str | None, use_tls: bool, tls_dir: str | None, tls_hosts: tuple[str, ...],
       adapt: str | None, no_service: bool) -> None:
    """Start a scheduler and WORKERS workers; print the address to use.

    With --tls every port (scheduler, workers, dashboards) requires a
    certificate from the cluster's CA; drivers join with
    AIRFLOWLESS_TLS_DIR pointing at a folder holding ca.pem, client.pem and
    client-key.pem.
    """
    from ..errors import AirflowlessError
    from ..runtime.processes import (
        is_alive,
        load_state,
        save_state,
        start_process_cluster,
        start_service,
    )

    existing = load_state()
    if existing is not None and is_alive(existing.scheduler_pid):
        click.echo(f"a cluster is already up at {existing.address} (dashboard {existing.dashboard_link}); "
                   "stop it with `airflowless cluster down`", err=True)
        sys.exit(1)
    try:
        declared = _parse_resources(resources)
        certificates = _certificates(use_tls, tls_dir, tls_hosts, host)
        if adapt is not None:
            started = _start_adaptive(adapt, certificates, threads=threads, port=port,
                                      dashboard_port=dashboard_port, host=host, resources=declared)
        else:
            started = start_process_cluster(n_workers=workers, threads_per_worker=threads, scheduler_port=port,
                                            dashboard_port=dashboard_port, host=host, resources=declared,
                                            tls=certificates)
    except AirflowlessError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    service_error = None
    if not no_service:
        try:
            started = start_service(started)
        except AirflowlessError as exc:  # the cluster is up: say why the service is not, and go on
            service_error = str(exc)
    path = save_state(started)
    click.echo(f"scheduler  {started.address}")
    click.echo(f"dashboard  {started.dashboard_link}")
    if adapt is not None:
        click.echo(f"workers    adaptive, {adapt} (logs in {started.log_dir})")
    else:
        click.echo(f"workers    {len(started.worker_pids)} (logs in {started.log_dir})")
    pages = started.dashboard_link.rsplit("/status", 1)[0] + "/airflowless/"
    from ..settings import get_settings

    where = "AIRFLOWLESS_TOKEN" if get_settings().token else f"the token in {_token_file(started.dashboard_link)}"
    click.echo(f"pages      {pages}   (actions need {where})")
    if started.service_pid is not None:
        click.echo(f"service    pid {started.service_pid}, runs deployments and submissions "
                   f"(log {started.log_dir}/service.log)")
    elif service_error is not None:
        click.echo(f"service    not started: {service_error}", err=True)
    if started.tls_dir:
        click.echo(f"tls        certificates in {started.tls_dir} (drivers need ca.pem, client.pem, client-key.pem)")
        click.echo(f"use it:    export AIRFLOWLESS_ADDRESS={started.address} AIRFLOWLESS_TLS_DIR={started.tls_dir}"
                   f"   (state in {path})")
    else:
        click.echo(f"use it:    export AIRFLOWLESS_ADDRESS={started.address}   (state in {path})")


@cluster.command("down")
@click.option("--keep-logs", is_flag=True, help="Keep the cluster's log folder (it is removed by default).")
def down(keep_logs: bool) -> None:
    """Stop the cluster started by `airflowless cluster up`."""
    import shutil

    from ..runtime.processes import default_state_path, load_state, stop_process_cluster

    existing = load_state()
    if existing is None:
        click.echo("no cluster is up (nothing recorded in the state file)")
        return
    stop_process_cluster(existing)
    default_state_path().unlink(missing_ok=True)
    _token_file(existing.dashboard_link).unlink(missing_ok=True)  # its scheduler removes it, unless killed
    logs = Path(existing.log_dir)
    if keep_logs or not logs.name.startswith("airflowless-cluster-"):  # a folder cluster up made for them
        click.echo(f"stopped the cluster at {existing.address} (logs kept in {logs})")
    else:
        shutil.rmtree(logs, ignore_errors=True)
        click.echo(f"stopped the cluster at {existing.address} and removed its logs (--keep-logs keeps them)")


@cluster.command("status")
def status() -> None:
    """Say whether the background cluster is up, and where."""
    from ..runtime.processes import connected_workers, is_alive, load_state

    existing = load_state()
    if existing is None or not is_alive(existing.scheduler_pid):
        click.echo("no cluster is up")
        sys.exit(1)
    if existing.adaptive is None and existing.worker_pids:
        alive = sum(is_alive(pid) for pid in existing.worker_pids)
        workers = f"{alive}/{len(existing.worker_pids)} workers alive"
    else:  # an adaptive cluster: its scheduler's process starts the workers, so only the scheduler knows them
        bounds = f"adaptive {existing.adaptive[0]}:{existing.adaptive[1]}" if existing.adaptive else "adaptive"
        count = connected_workers(existing, timeout=_STATUS_TIMEOUT)
        workers = (f"{count} worker{'' if count == 1 else 's'} ({bounds})" if count is not None else
                   f"workers unknown ({bounds}): the scheduler's process is running but the scheduler did not "
                   f"answer within {_STATUS_TIMEOUT:g} s; see {existing.log_dir}/scheduler.log")
    service = ""
    if existing.service_pid is not None:
        service = f", service pid {existing.service_pid} {'up' if is_alive(existing.service_pid) else 'gone'}"
    click.echo(f"up at {existing.address}, {workers}, dashboard {existing.dashboard_link}{service}")


def _token_file(dashboard_link: str) -> Path:
    """Where the control plane of the cluster whose dashboard is at ``dashboard_link`` keeps its token."""
    from urllib.parse import urlsplit

    from ..control.auth import token_path
    from ..settings import get_settings

    return token_path(get_settings().home, urlsplit(dashboard_link).port or 0)


_STATUS_TIMEOUT = 3.0  # seconds `cluster status` waits for an adaptive cluster's scheduler to answer


def _certificates(use_tls: bool, tls_dir: str | None, hosts: tuple[str, ...], bind: str) -> str | None:
    """The folder of certificates to run on: ``tls_dir``, or one generated in the home (None: no TLS)."""
    from ..runtime import tls
    from ..settings import get_settings

    if tls_dir is not None:
        return str(tls.load(tls_dir).directory)
    if not use_tls:
        return None
    extra = [*hosts, bind] if bind not in {"0.0.0.0", "::", ""} else list(hosts)
    return str(tls.generate(get_settings().home / "tls", hosts=extra).directory)


def _start_adaptive(adapt: str, certificates: str | None, **options: Any) -> Any:
    """``--adapt MIN:MAX``: one process holding the scheduler and the workers it adds and retires."""
    from ..errors import ConfigError
    from ..runtime.processes import start_adaptive_cluster

    low, sep, high = adapt.partition(":")
    try:
        minimum, maximum = int(low), int(high)
    except ValueError:
        raise ConfigError(f"--adapt takes MIN:MAX worker counts like 1:4, got {adapt!r}") from None
    if not sep:
        raise ConfigError(f"--adapt takes MIN:MAX worker counts like 1:4, got {adapt!r}")
    return start_adaptive_cluster(minimum=minimum, maximum=maximum, threads_per_worker=options["threads"],
                                  scheduler_port=options["port"], dashboard_port=options["dashboard_port"],
                                  host=options["host"], resources=options["resources"], tls=certificates)


def _parse_resources(text: str | None) -> dict[str, float] | None:
    from ..errors import ConfigError

    if not text:
        return None
    found: dict[str, float] = {}
    for part in text.split(","):
        name, sep, amount = part.partition("=")
        try:
            found[name.strip()] = float(amount)
        except ValueError:
            raise ConfigError(f"--resources takes NAME=AMOUNT pairs like CPU=1,GPU=1; got {part!r}") from None
        if not sep or not name.strip():
            raise ConfigError(f"--resources takes NAME=AMOUNT pairs like CPU=1,GPU=1; got {part!r}")
    return found
