"""``airflowless pipelines show FILE``: a pipeline's parameters and stages, without running it.

The module is imported (as ``airflowless run`` does) and the pipeline traced
with its defaults and any ``--param``; nothing starts a cluster or writes the
record. A pipeline with required parameters shows its stages once they are given.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import AirflowlessError


@click.group()
def pipelines() -> None:
    """Look at pipeline modules without running them."""


@pipelines.command("show")
@click.argument("target")
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE",
              help="Set a parameter to trace the stages with (as `airflowless run` takes it). Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def show(target: str, params: tuple[str, ...], as_json: bool) -> None:
    """The pipeline TARGET (FILE or module, optionally :NAME): its parameters and its stages."""
    from ..dag import load_pipeline
    from ..dag.params import describe, parse_assignments

    try:
        pipe = load_pipeline(target)
        values = parse_assignments(list(params), pipe.params)
        missing = [p.name for p in pipe.params.values() if p.required and p.name not in values]
        stages = None if missing else _stages(pipe.graph(**values))
    except AirflowlessError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    described = {"pipeline": pipe.name, "module": target, "parameters": describe(pipe.params), "stages": stages,
                 "missing": missing}
    if as_json:
        from .render import echo_json

        echo_json(described)
        return
    _print(described)


def _stages(graph: Any) -> list[dict[str, Any]]:
    order = graph.validate()
    rows = []
    for name in order:
        node = graph.nodes[name]
        options = node.stage.options
        rows.append({"node": name, "stage": node.stage.name, "upstream": node.upstream, "retries": options.retries,
                     "timeout": options.timeout, "cache": options.cache, "resources": dict(options.resources)})
    return rows


def _print(described: dict[str, Any]) -> None:
    from rich.table import Table

    from .render import _console

    console = _console()
    click.echo(f"pipeline {described['pipeline']} in {described['module']}")
    table = Table(title="parameters", title_justify="left")
    for column in ("name", "type", "default"):
        table.add_column(column, overflow="fold")
    for p in described["parameters"]:
        table.add_row(p["name"], p["type"], "(required)" if p["required"] else repr(p["default"]))
    console.print(table)
    if described["stages"] is None:
        click.echo(f"stages: give {', '.join(described['missing'])} with --param NAME=VALUE to trace them")
        return
    stages = Table(title="stages, in the order they can run", title_justify="left")
    for column in ("node", "stage", "after", "retries", "timeout", "cache", "resources"):
        stages.add_column(column, overflow="fold")
    for s in described["stages"]:
        stages.add_row(s["node"], s["stage"], ", ".join(s["upstream"]), str(s["retries"]),
                       "" if s["timeout"] is None else f"{s['timeout']:g}s", "yes" if s["cache"] else "no",
                       ", ".join(f"{k}={v:g}" for k, v in s["resources"].items()))
    console.print(stages)
