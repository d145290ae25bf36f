"""``airflowless experiments``: read the record of experiments (Tuner searches and Trainer fits).

airflowless experiments list
airflowless experiments show taxi-tune      # by name (the latest with it) or by id
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Any

import click

from ..store.records import AUTO_FILLED, ExperimentStatus
from .runs import _open

_STYLE = {"completed": "green", "errored": "red", "completed_with_errors": "yellow", "running": "blue",
          "pending": "cyan", "paused": "magenta", "interrupted": "yellow"}


@click.group()
def experiments() -> None:
    """List and show experiments (Tuner searches, Trainer fits) and their trials from the store."""


@experiments.command("list")
@click.option("--limit", default=20, show_default=True, help="How many of the latest experiments.")
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the REST API's shape) instead of a table.")
def list_experiments(limit: int, db: str | None, as_json: bool) -> None:
    """The latest experiments, newest first, with their trial counts and best result."""
    from rich.table import Table

    from .render import _console

    store = _open(db)
    if as_json:
        from ..control import reads
        from .render import echo_json

        echo_json(reads.experiments(store, limit=limit))
        return
    found = store.list_experiments(limit=limit)
    if not found:
        click.echo(f"no experiments in the store at {store.url}")
        return
    table = Table(title="experiments", title_justify="left")
    for column in ("id", "name", "kind", "status", "trials", "metric", "best", "started", "duration"):
        table.add_column(column, overflow="fold")
    for experiment in found:
        trials = store.list_trials(experiment["id"])
        best = _best(experiment, trials)
        table.add_row(str(experiment["id"]), experiment["name"], experiment["kind"], _status(experiment["status"]),
                      _counts(trials, all_statuses=False), _metric(experiment),
                      "" if best is None else f"{_number(best[1])} ({best[0]['name']})",
                      _utc(experiment["created_at"]).strftime("%Y-%m-%d %H:%M:%S"),
                      _duration(experiment["created_at"], experiment["finished_at"]))
    _console().print(table)
    click.echo("see one with: airflowless experiments show NAME_OR_ID")


@experiments.command("show")
@click.argument("name_or_id")
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the REST API's shape) instead of tables.")
def show_experiment(name_or_id: str, db: str | None, as_json: bool) -> None:
    """One experiment (by name, the latest with it, or by id): its trials, their status and last metrics."""
    from rich.table import Table

    from .render import _console

    store = _open(db)
    experiment = store.find_experiment(name_or_id)
    if experiment is None:
        click.echo(f"error: no experiment {name_or_id!r} in the store at {store.url}; "
                   "see `airflowless experiments list`", err=True)
        sys.exit(2)
    if as_json:
        from ..control import reads
        from .render import echo_json

        echo_json(reads.experiment(store, experiment["id"]))
        return
    trials = store.list_trials(experiment["id"])
    took = _duration(experiment["created_at"], experiment["finished_at"])
    table = Table(title=f"experiment {experiment['id']} {experiment['name']} ({experiment['kind']}): "
                        f"{ExperimentStatus.shown(experiment['status'])}" + (f" in {took}" if took else ""),
                  title_justify="left")
    metric = experiment["metric"] if experiment["metric"] else None
    configs = [_flat(trial["config"] or {}) for trial in trials]  # {"params": {"eta": 0.3}} -> "params/eta"
    config_keys = sorted({key for config in configs for key in config})
    # the metric being optimised first, then each config key as a column; cells fold, nothing is cut
    columns = ["trial", "status", *([_metric(experiment)] if metric else []), *config_keys, "iter", "restarts",
               "other metrics", "checkpoint"]
    for column in columns:
        table.add_column(column, overflow="fold")
    root = (experiment["storage_path"] or "").rstrip("/") + "/"
    for trial, config in zip(trials, configs, strict=True):
        checkpoint = trial["checkpoint_uri"] or ""
        last = trial["last_metrics"] or {}
        table.add_row(trial["name"], _status(trial["status"]),
                      *([_number(last[metric]) if metric in last else ""] if metric else []),
                      *(_plain(config[key]) if key in config else "" for key in config_keys),
                      str(trial["iterations"]), str(trial["restarts"]),
                      _metrics({k: v for k, v in last.items() if k != metric}),
                      checkpoint.removeprefix(root) if root != "/" else checkpoint)
    console = _console()
    console.print(table)
    lines = [f"trials: {_counts(trials)}"]
    if experiment["metric"]:
        best = _best(experiment, trials)
        lines.append(f"metric: {_metric(experiment)}" + (
            "" if best is None else f"; best {_number(best[1])} in {best[0]['name']} "
                                    f"(config {_plain(best[0]['config'])})"))
    if experiment["storage_path"]:
        lines.append(f"storage: {experiment['storage_path']}")
    if experiment.get("run_id") is not None:
        lines.append(f"started by run {experiment['run_id']}, stage {experiment['stage']}: "
                     f"airflowless runs show {experiment['run_id']}")
    if (experiment.get("summary") or {}).get("prepared_data"):
        lines.append(_prepared_data(experiment["summary"]["prepared_data"]))
    for line in lines:
        click.echo(line)
    for trial in trials:
        if trial["error"]:
            click.echo(f"\n--- trial {trial['name']} ---\n{trial['error']}")
    if experiment["error"]:
        click.echo(f"\n--- experiment ---\n{experiment['error']}")


# -- formatting ---------------------------------------------------------------------------------

def _prepared_data(used: dict[str, Any]) -> str:
    """The prepared-data cache's use by the experiment's trials, on one line."""
    workers = used.get("workers", {})
    return (f"prepared data: {used['hits']} hit(s), {used['misses']} miss(es), {used['evictions']} evicted, "
            f"{used['bytes'] / 1e6:.1f} MB held at the end; the workers' matrices: {workers.get('hits', 0)} hit(s), "
            f"{workers.get('misses', 0)} miss(es), {workers.get('evictions', 0)} evicted, "
            f"{workers.get('bytes', 0) / 1e6:.1f} MB held")


def _status(text: str) -> str:
    text = ExperimentStatus.shown(text)
    style = _STYLE.get(text)
    return f"[{style}]{text}[/{style}]" if style else text


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _duration(start: datetime, end: datetime | None) -> str:
    return "" if end is None else f"{(_utc(end) - _utc(start)).total_seconds():.1f}s"


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _metrics(values: dict[str, Any] | None) -> str:
    shown = {k: v for k, v in (values or {}).items()
             if k != "training_iteration" and k not in AUTO_FILLED and not k.startswith("_")}
    return ", ".join(f"{k}={_number(v)}" for k, v in shown.items())


def _plain(config: Any) -> str:
    if isinstance(config, dict):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in config.items()) + "}"
    return _number(config)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config keys as one level, joined by ``/`` (as Ray's result dataframes name them)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _metric(experiment: dict[str, Any]) -> str:
    return f"{experiment['metric']} ({experiment['mode']})" if experiment["metric"] else ""


def _counts(trials: list[dict[str, Any]], *, all_statuses: bool = True) -> str:
    """``3 (2 completed, 1 errored)``; without ``all_statuses`` the completed ones go unsaid."""
    by_status: dict[str, int] = {}
    for trial in trials:
        status = ExperimentStatus.shown(trial["status"])
        by_status[status] = by_status.get(status, 0) + 1
    order = ["completed", "running", "pending", "paused", "interrupted", "errored"]
    shown = sorted(by_status, key=lambda s: (order.index(s) if s in order else len(order), s))
    detail = ", ".join(f"{by_status[s]} {s}" for s in shown if all_statuses or s != "completed")
    return f"{len(trials)}" + (f" ({detail})" if detail else "")


def _best(experiment: dict[str, Any], trials: list[dict[str, Any]]) -> tuple[dict[str, Any], float] | None:
    """The trial whose last report is best by the experiment's metric and mode."""
    metric, mode = experiment["metric"], experiment["mode"]
    if not metric or mode not in ("min", "max"):
        return None
    scored = [(t, float(t["last_metrics"][metric])) for t in trials
              if isinstance((t["last_metrics"] or {}).get(metric), (int, float))]
    if not scored:
        return None
    pick = min if mode == "min" else max
    return pick(scored, key=lambda pair: pair[1])
