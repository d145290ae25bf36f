"""``airflowless``: the command group and its small commands."""

from __future__ import annotations

import click

from .. import __version__
from .cluster import cluster
from .experiments import experiments
from .models import models
from .pipelines import pipelines
from .run import run
from .runs import runs
from .serve import serve
from .service import backfill, deploy, deployments, pools, service, submit
from .ui import ui


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """airflowless: ML pipelines on a Dask cluster, with a durable record of every run.

    \b
    airflowless run pipelines/taxi.py --param n_rows=1000000
    airflowless runs list
    airflowless cluster up --workers 2
    """


@cli.command()
def version() -> None:
    """Print the versions of airflowless and of Dask."""
    import dask
    import distributed

    click.echo(f"airflowless {__version__} (dask {dask.__version__}, distributed {distributed.__version__})")


cli.add_command(run)
cli.add_command(runs)
cli.add_command(pipelines)
cli.add_command(cluster)
cli.add_command(experiments)
cli.add_command(models)
cli.add_command(serve)
cli.add_command(ui)
for command in (service, deploy, submit, backfill, deployments, pools):
    cli.add_command(command)


def main() -> None:
    cli()
