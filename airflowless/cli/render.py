"""Tables for the terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..dag.result import stage_rows
from ..store.records import RunRecord, RunStatus

_STYLE = {"succeeded": "green", "cached": "cyan", "failed": "red", "skipped": "yellow",
          "running": "blue", "cancelled": "magenta", "abandoned": "magenta", "queued": "dim"}


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _short(text: str, limit: int = 72) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _status(text: str) -> str:
    style = _STYLE.get(text)
    return f"[{style}]{text}[/{style}]" if style else text


def print_run(run: RunRecord) -> None:
    took = f" in {run.duration_s:.2f}s" if run.duration_s is not None else ""
    table = Table(title=f"run {run.id} of {run.pipeline}: {run.status}{took}", title_justify="left")
    for column in ("stage", "status", "attempts", "duration", "worker", "output"):
        table.add_column(column, overflow="fold")
    for row in stage_rows(run):
        table.add_row(row[0], _status(row[1]), *row[2:5], _short(row[5]))
    console = _console()
    console.print(table)
    if run.params:
        console.print("params: " + ", ".join(f"{k}={v!r}" for k, v in run.params.items()), markup=False)
    if run.status in (RunStatus.RUNNING, RunStatus.ABANDONED) and run.driver_pid is not None:
        state = "runs it" if run.status == RunStatus.RUNNING else "is gone; resume the run with --resume"
        console.print(f"driver: pid {run.driver_pid} on {run.driver_host} {state}", markup=False)
    if run.resumed_by is not None:
        console.print(f"resumed by run {run.resumed_by}", markup=False)
    if run.trigger is not None:
        interval = (f" for the interval {run.interval_start.isoformat()} .. {run.interval_end.isoformat()}"
                    if run.interval_start and run.interval_end else "")
        console.print(f"started by the service: {run.trigger}{interval}"
                      f"{f': {run.trigger_detail}' if run.trigger_detail else ''}"
                      f"{f' after run {run.upstream_run}' if run.upstream_run is not None else ''}"
                      f"{f' (backfill {run.backfill_id})' if run.backfill_id else ''}", markup=False)
    if run.status == RunStatus.QUEUED and run.queue_reason:
        console.print(f"queued: {run.queue_reason}", markup=False)


def print_runs(runs: list[RunRecord]) -> None:
    table = Table(title="runs", title_justify="left")
    for column in ("id", "pipeline", "status", "started", "duration", "params"):
        table.add_column(column, overflow="fold")
    for r in runs:
        began = r.started_at or (r.created_at if r.status != RunStatus.QUEUED and r.trigger is None else None)
        table.add_row(str(r.id), r.pipeline, _status(r.status),
                      began.strftime("%Y-%m-%d %H:%M:%S") if began else f"queued {r.created_at:%H:%M:%S}",
                      f"{r.duration_s:.2f}s" if r.duration_s is not None else "",
                      _short(", ".join(f"{k}={v!r}" for k, v in r.params.items())))
    _console().print(table)


def echo_json(value: object) -> None:
    """``value`` as indented JSON on stdout (standard JSON: NaN is null), for the ``--json`` options."""
    import json

    import click

    from ..control.reads import plain

    click.echo(json.dumps(plain(value), indent=2, allow_nan=False))
