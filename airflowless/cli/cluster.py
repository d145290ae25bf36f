"""``airflowless cluster``: a local scheduler and workers as background processes."""

from __future__ import annotations

import sys

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
              help="Interface to bind; the default keeps the cluster private to this machine.")
@click.option("--resources", default=None, metavar="NAME=AMOUNT[,...]",
              help="Resources each worker declares (default CPU=<threads>).")
def up(workers: int, threads: int, port: int, dashboard_port: int | None, host: str,
       resources: str | None) -> None:
    """Start a scheduler and WORKERS workers; print the address to use."""
    from ..errors import AirflowlessError
    from ..runtime.processes import is_alive, load_state, save_state, start_process_cluster

    existing = load_state()
    if existing is not None and is_alive(existing.scheduler_pid):
        click.echo(f"a cluster is already up at {existing.address} (dashboard {existing.dashboard_link}); "
                   "stop it with `airflowless cluster down`", err=True)
        sys.exit(1)
    try:
        declared = _parse_resources(resources)
        started = start_process_cluster(n_workers=workers, threads_per_worker=threads, scheduler_port=port,
                                        dashboard_port=dashboard_port, host=host, resources=declared)
    except AirflowlessError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    path = save_state(started)
    click.echo(f"scheduler  {started.address}")
    click.echo(f"dashboard  {started.dashboard_link}")
    click.echo(f"workers    {len(started.worker_pids)} (logs in {started.log_dir})")
    click.echo(f"use it:    export AIRFLOWLESS_ADDRESS={started.address}   (state in {path})")


@cluster.command("down")
def down() -> None:
    """Stop the cluster started by `airflowless cluster up`."""
    from ..runtime.processes import default_state_path, load_state, stop_process_cluster

    existing = load_state()
    if existing is None:
        click.echo("no cluster is up (nothing recorded in the state file)")
        return
    stop_process_cluster(existing)
    default_state_path().unlink(missing_ok=True)
    click.echo(f"stopped the cluster at {existing.address}")


@cluster.command("status")
def status() -> None:
    """Say whether the background cluster is up, and where."""
    from ..runtime.processes import is_alive, load_state

    existing = load_state()
    if existing is None or not is_alive(existing.scheduler_pid):
        click.echo("no cluster is up")
        sys.exit(1)
    alive = sum(is_alive(pid) for pid in existing.worker_pids)
    click.echo(f"up at {existing.address}, {alive}/{len(existing.worker_pids)} workers alive, "
               f"dashboard {existing.dashboard_link}")


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
