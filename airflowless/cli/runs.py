"""``airflowless runs``: read the record of pipeline runs, follow their logs, cancel them."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from ..errors import StoreError

if TYPE_CHECKING:
    from ..store import Store


@click.group()
def runs() -> None:
    """List and show pipeline runs from the store."""


@runs.command("list")
@click.option("--limit", default=20, show_default=True, help="How many of the latest runs.")
@click.option("--pipeline", default=None, help="Only runs of this pipeline.")
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the REST API's shape) instead of a table.")
def list_runs(limit: int, pipeline: str | None, db: str | None, as_json: bool) -> None:
    """The latest runs, newest first."""
    from .render import print_runs

    records = _open(db).list_runs(limit=limit, pipeline=pipeline)
    if as_json:
        from ..control.reads import run_summary
        from .render import echo_json

        echo_json({"runs": [run_summary(record) for record in records]})
        return
    if not records:
        which = f"of pipeline {pipeline!r} " if pipeline else ""
        click.echo(f"no runs {which}recorded yet; start one with `airflowless run pipelines/FILE.py`")
        return
    print_runs(records)


@runs.command("show")
@click.argument("run_id", type=int)
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the REST API's shape) instead of a table.")
def show_run(run_id: int, db: str | None, as_json: bool) -> None:
    """One run: its stages, their states, timings and errors."""
    from .render import print_run

    store = _open(db)
    record = _run(store, run_id)
    if as_json:
        from ..control.reads import run
        from .render import echo_json

        echo_json(run(store, run_id))
        return
    print_run(record)
    for note in store.notifications_of(run_id):
        why = f" ({note['error']})" if note["error"] else ""
        click.echo(f"notified {note['event']} via {note['channel']}: {note['status']}{why}")
    for experiment in store.experiments_of_run(run_id):
        click.echo(f"stage {experiment['stage']} started experiment {experiment['id']} {experiment['name']} "
                   f"({experiment['kind']}): airflowless experiments show {experiment['id']}")
    for stage in record.stages:
        if stage.traceback:
            click.echo(f"\n--- stage {stage.node} ---\n{stage.traceback}")


@runs.command("logs")
@click.argument("run_id", type=int)
@click.argument("stage", required=False)
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the stage writes, until it ends.")
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
def run_logs(run_id: int, stage: str | None, follow: bool, db: str | None) -> None:
    """What the run's stages printed and logged, every attempt (one STAGE, e.g. 'score[3]', if given)."""
    import time

    from ..dag.logs import attempt_logs, read_log
    from ..store import RunStatus, StageStatus

    store = _open(db)
    try:
        record = store.get_run(run_id)
        chosen = [record.stage(stage)] if stage else record.stages
    except KeyError as exc:
        click.echo(f"error: {exc.args[0]}", err=True)
        sys.exit(2)
    if not stage and record.trigger is not None:  # started by the service: its driver's output first
        _driver_log(store, run_id, follow)
        if follow:
            return
    if follow and not stage:
        click.echo("error: --follow follows one stage; name it, e.g. `airflowless runs logs "
                   f"{run_id} {record.stages[0].node if record.stages else 'STAGE'} --follow`", err=True)
        sys.exit(2)
    for one in chosen:
        uris = attempt_logs(one.node, one.log_uri, one.attempts)
        if not uris and not follow:
            click.echo(f"== {one.node}: no log ({one.status}) ==")
            continue
        for attempt, uri in uris[:-1] if follow else uris:
            click.echo(f"== {one.node}, attempt {attempt} ==")
            click.echo(read_log(uri).decode("utf-8", "replace"), nl=False)
    if follow:  # the latest attempt, as it grows, until the stage has ended
        one, offset, attempt = chosen[0], 0, 0
        while True:
            run = store.get_run(run_id)
            one = run.stage(one.node)
            uris = attempt_logs(one.node, one.log_uri, one.attempts)
            if uris and uris[-1][0] != attempt:
                attempt, offset = uris[-1][0], 0
                click.echo(f"== {one.node}, attempt {attempt} ==")
            if uris:
                data = read_log(uris[-1][1], offset)
                offset += len(data)
                click.echo(data.decode("utf-8", "replace"), nl=False)
            if one.status not in StageStatus.UNSETTLED or run.status != RunStatus.RUNNING:
                break
            time.sleep(0.5)


def _driver_log(store: Store, run_id: int, follow: bool) -> None:
    """The output of the driver the service started for run ``run_id`` (until the run ends, with ``follow``):
    the service's own file where it is (its machine), else its copy in the run's storage, a few seconds
    behind, which the service closes with an end mark once it saw the driver end."""
    import codecs
    import time

    from ..dag.logs import read_log
    from ..service.driver_logs import END_MARK, log_path, whole
    from ..store import RunStatus

    path, offset, uri, closed = log_path(run_id), 0, None, False
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode  # a character may straddle two reads
    seen = b""  # the last bytes read: the end mark may straddle two reads too
    while True:
        run = store.get_run(run_id)
        if uri is None:  # not known yet while the run waits for its driver
            uri = str(path) if path.exists() else run.driver_log_uri
            if uri is not None:
                click.echo(f"== driver (started by the service; {uri}) ==")
        data = read_log(uri, offset) if uri else b""
        offset += len(data)
        copy = uri is not None and uri != str(path)
        seen = (seen + data)[-len(END_MARK):]
        closed = closed or (copy and seen == END_MARK)
        text = decode(data)
        click.echo(text.removesuffix(END_MARK.decode()) if closed else text, nl=False)
        ended = run.status not in (RunStatus.QUEUED, RunStatus.RUNNING)
        if uri is None and not follow:
            click.echo(f"== driver: no log (the run is {run.status}, and no service copied its driver's output) ==")
        if not follow or (ended and (not copy or closed or whole(b"", run.finished_at))):
            return
        time.sleep(0.5)


@runs.command("cancel")
@click.argument("run_id", type=int)
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
def cancel_run(run_id: int, db: str | None) -> None:
    """Cancel a queued run, or ask a running run's driver to stop it (as Ctrl-C would: stages cancelled)."""
    from ..store import RunStatus

    store = _open(db)
    record = _run(store, run_id)
    if record.status == RunStatus.QUEUED and store.cancel_queued_run(run_id, "cancelled by `airflowless runs cancel`"):
        click.echo(f"run {run_id} cancelled (it was queued)")
        return
    record = store.get_run(run_id)
    if record.status != RunStatus.RUNNING:
        click.echo(f"error: run {run_id} has already ended ({record.status}); only a queued or running run can be "
                   "cancelled", err=True)
        sys.exit(1)
    if not _signal_driver(record):
        click.echo(f"error: the driver of run {run_id} (pid {record.driver_pid} on {record.driver_host}) is not on "
                   "this machine; cancel it from the run's page or the REST API, which reach it through the "
                   "scheduler", err=True)
        sys.exit(1)
    click.echo(f"asked the driver of run {run_id} (pid {record.driver_pid}) to cancel it")


def _signal_driver(record: Any) -> bool:
    """SIGINT to the run's driver if it runs on this machine (it cancels the run as on Ctrl-C); whether sent."""
    import os
    import signal
    import socket

    from ..store.liveness import Driver, driver_alive

    driver = Driver(record.driver_host, record.driver_pid, record.driver_started)
    if record.driver_pid is None or record.driver_host != socket.gethostname():
        return False
    if not driver_alive(driver, heartbeat_at=None, now=0.0):
        return False
    os.kill(record.driver_pid, signal.SIGINT)
    return True


def _run(store: Store, run_id: int) -> Any:
    """Run ``run_id`` of ``store``; no such run is an error message and exit code 2."""
    try:
        return store.get_run(run_id)
    except KeyError as exc:
        click.echo(f"error: {exc.args[0]}", err=True)
        sys.exit(2)


def _open(db: str | None) -> Store:
    """The store at ``db``; a bad URL is an error message and exit code 2, not a traceback."""
    from ..store import open_store

    try:
        return open_store(db)
    except StoreError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
