"""``airflowless runs``: read the record of pipeline runs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

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
    try:
        record = store.get_run(run_id)
    except KeyError as exc:
        click.echo(f"error: {exc.args[0]}", err=True)
        sys.exit(2)
    if as_json:
        from ..control.reads import run
        from .render import echo_json

        echo_json(run(store, run_id))
        return
    print_run(record)
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

    from ..dag.logs import read_log
    from ..store import RunStatus, StageStatus

    store = _open(db)
    try:
        record = store.get_run(run_id)
        chosen = [record.stage(stage)] if stage else record.stages
    except KeyError as exc:
        click.echo(f"error: {exc.args[0]}", err=True)
        sys.exit(2)
    if follow and not stage:
        click.echo("error: --follow follows one stage; name it, e.g. `airflowless runs logs "
                   f"{run_id} {record.stages[0].node if record.stages else 'STAGE'} --follow`", err=True)
        sys.exit(2)
    for one in chosen:
        uris = _attempt_logs(one.node, one.log_uri, one.attempts)
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
            uris = _attempt_logs(one.node, one.log_uri, one.attempts)
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


def _attempt_logs(node: str, latest: str | None, attempts: int) -> list[tuple[int, str]]:
    """(attempt, log URI) of every attempt of ``node``, beside the latest attempt's log."""
    from ..dag.logs import log_name

    if not latest:
        return []
    folder = latest.rpartition("/")[0]
    return [(n, f"{folder}/{log_name(node, n)}") for n in range(1, max(attempts, 1) + 1)]


def _open(db: str | None) -> Store:
    """The store at ``db``; a bad URL is an error message and exit code 2, not a traceback."""
    from ..store import open_store

    try:
        return open_store(db)
    except StoreError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
