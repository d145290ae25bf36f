"""``airflowless models``: the model registry's versions and aliases, from the record."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import AirflowlessError

_DB = click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")


def _store(db: str | None) -> Any:
    from ..store import open_store

    return open_store(db)


def _fail(exc: Exception) -> None:
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group()
def models() -> None:
    """Registered models: versions (with metrics and lineage) and aliases such as champion."""


@models.command("list")
@_DB
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_models(db: str | None, as_json: bool) -> None:
    """Each registered model: its newest version, how many, its aliases."""
    from rich.table import Table

    from .. import models as registry
    from .render import _console, echo_json

    rows = registry.list_models(store=_store(db))
    if as_json:
        echo_json(rows)
        return
    grid = Table(title="models", title_justify="left")
    for column in ("name", "latest", "versions", "aliases", "updated (UTC)"):
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(row["name"], str(row["latest_version"]), str(row["versions"]),
                     " ".join(f"{alias}->{version}" for alias, version in row["aliases"].items()),
                     row["updated_at"].isoformat(timespec="seconds"))
    _console().print(grid)


@models.command("show")
@click.argument("name")
@_DB
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(name: str, db: str | None, as_json: bool) -> None:
    """Every version of model NAME: metrics, tags, aliases, where it came from."""
    from dataclasses import asdict

    from rich.table import Table

    from .. import models as registry
    from .render import _console, echo_json

    try:
        found = registry.versions(name, store=_store(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    if as_json:
        echo_json([asdict(v) for v in found])
        return
    grid = Table(title=f"model {name}", title_justify="left")
    for column in ("version", "aliases", "metrics", "tags", "lineage", "registered (UTC)"):
        grid.add_column(column, overflow="fold")
    for v in found:
        lineage = " ".join(f"{label} {value}" for label, value in (
            ("run", v.run_id), ("stage", v.stage), ("experiment", v.experiment_id), ("trial", v.trial_id))
            if value is not None) or (v.source or "")
        grid.add_row(str(v.version), " ".join(v.aliases), _short(v.metrics), _short(v.tags), lineage,
                     v.created_at.isoformat(timespec="seconds") if v.created_at else "")
    _console().print(grid)


@models.command("alias")
@click.argument("name")
@click.argument("alias")
@click.argument("version", type=int, required=False)
@click.option("--remove", is_flag=True, help="Remove the alias instead.")
@_DB
def alias(name: str, alias: str, version: int | None, remove: bool, db: str | None) -> None:
    """Point ALIAS of model NAME at VERSION (moving it); with --remove, take it away."""
    from .. import models as registry

    try:
        if remove:
            registry.remove_alias(name, alias, store=_store(db))
        elif version is None:
            raise click.UsageError("give the VERSION the alias points at (or --remove)")
        else:
            registry.set_alias(name, alias, version, store=_store(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    click.echo(f"{name}@{alias} removed" if remove else f"{name}@{alias} -> version {version}")


@models.command("delete")
@click.argument("name")
@click.argument("version", type=int)
@_DB
def delete(name: str, version: int, db: str | None) -> None:
    """Remove VERSION of model NAME from the record (refused while an alias points at it)."""
    from .. import models as registry

    try:
        registry.delete_version(name, version, store=_store(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    click.echo(f"{name} version {version} deleted")


def _short(values: dict[str, Any] | None, most: int = 4) -> str:
    if not values:
        return ""
    shown = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(values.items())[:most]]
    return ", ".join(shown) + (" ..." if len(values) > most else "")
