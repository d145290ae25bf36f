"""``airflowless models``: the model registry's versions and aliases, from the record."""

from __future__ import annotations

from typing import Any

import click

from ..errors import AirflowlessError
from .service import _DB, _fail, _open


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

    rows = registry.list_models(store=_open(db))
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
        store = _open(db)
        found = registry.versions(name, store=store)
        served = {version: [f"{row['app']}/{row['deployment']}" for row in rows]
                  for version, rows in store.model_servers(name).items()}
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    if as_json:
        echo_json([{**asdict(v), "served_by": served.get(v.version, [])} for v in found])
        return
    grid = Table(title=f"model {name}", title_justify="left")
    for column in ("version", "aliases", "metrics", "tags", "lineage", "served by", "registered (UTC)"):
        grid.add_column(column, overflow="fold")
    for v in found:
        lineage = " ".join(f"{label} {value}" for label, value in (
            ("run", v.run_id), ("stage", v.stage), ("experiment", v.experiment_id), ("trial", v.trial_id))
            if value is not None) or (v.source or "")
        grid.add_row(str(v.version), " ".join(v.aliases), _short(v.metrics), _short(v.tags), lineage,
                     " ".join(served.get(v.version, [])),
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
            registry.remove_alias(name, alias, store=_open(db))
        elif version is None:
            raise click.UsageError("give the VERSION the alias points at (or --remove)")
        else:
            registry.set_alias(name, alias, version, store=_open(db))
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
        registry.delete_version(name, version, store=_open(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    click.echo(f"{name} version {version} deleted")


def _short(values: dict[str, Any] | None, most: int = 4) -> str:
    if not values:
        return ""
    shown = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(values.items())[:most]]
    return ", ".join(shown) + (" ..." if len(values) > most else "")


@models.command("export")
@click.argument("name")
@click.argument("version", type=int)
@click.option("--to", "path", default=None, metavar="DIR", help="Write an MLflow model directory here.")
@click.option("--mlflow", "tracking_uri", default=None, metavar="URI",
              help="Log and register it on this MLflow tracking server instead.")
@click.option("--as", "registered_name", default=None, metavar="NAME", help="Its name in MLflow's registry.")
@_DB
def export(name: str, version: int, path: str | None, tracking_uri: str | None, registered_name: str | None,
           db: str | None) -> None:
    """Export VERSION of model NAME as an MLflow model (XGBoost, LightGBM, scikit-learn, PyTorch)."""
    from ..models.mlflow import export_mlflow, push_to_mlflow

    try:
        if (path is None) == (tracking_uri is None):
            raise click.UsageError("give one of --to DIR or --mlflow URI")
        if path is not None:
            kind = export_mlflow(name, version, path, store=_open(db))
            click.echo(f"{name} version {version}: an MLflow {kind} model in {path}")
        else:
            number = push_to_mlflow(name, version, tracking_uri=str(tracking_uri), registered_name=registered_name,
                                    store=_open(db))
            click.echo(f"{name} version {version}: MLflow model {registered_name or name} version {number}")
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)


@models.command("import")
@click.argument("model_uri")
@click.option("--name", required=True, help="The registered model it becomes a version of.")
@click.option("--mlflow", "tracking_uri", default=None, metavar="URI", help="The MLflow tracking server.")
@_DB
def import_(model_uri: str, name: str, tracking_uri: str | None, db: str | None) -> None:
    """A new version of model --name from the MLflow model MODEL_URI (models:/NAME/VERSION, runs:/ID/model)."""
    from ..models.mlflow import import_from_mlflow

    try:
        found = import_from_mlflow(model_uri, name, tracking_uri=tracking_uri, store=_open(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    click.echo(f"{name} version {found.version} from {model_uri}")
