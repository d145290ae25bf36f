"""``airflowless run``: run a pipeline module on the cluster.

Everything that can be checked is checked before a cluster starts (the
pipeline, its parameters, the run to resume). Every error ends as one line
on stderr and an exit code: 2 for what the user can fix in the command, 1 for
a run that failed (a stage, or the cluster going away), 128 + the signal for
a run cancelled by SIGINT (130) or SIGTERM (143). While it runs, each stage's
start, retry and end is one line on stderr as it happens (also when stderr
is a pipe or a log file); the table of the run follows on stdout.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time

import click

from ..errors import AirflowlessError, ClusterLostError, ParameterError, RunCancelled


@click.command()
@click.argument("target")
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE",
              help="Set a pipeline parameter (parsed to its declared type). Repeatable.")
@click.option("--address", metavar="ADDRESS", default=None,
              help="Scheduler to run on (default: AIRFLOWLESS_ADDRESS, else an embedded cluster).")
@click.option("--resume", type=int, default=None, metavar="RUN_ID",
              help="Resume a failed run: reuse its finished stages, run the rest.")
@click.option("--no-cache", is_flag=True, help="Run every stage, even if an earlier output matches.")
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--tls", "use_tls", is_flag=True,
              help="Run the embedded cluster on TLS with generated certificates (every port, serve included).")
def run(target: str, params: tuple[str, ...], address: str | None, resume: int | None,
        no_cache: bool, db: str | None, use_tls: bool) -> None:
    """Run the pipeline TARGET: a file or module, optionally :NAME (pipelines/taxi.py:taxi)."""
    from ..dag import load_pipeline
    from ..dag.params import parse_assignments
    from ..runtime import init, shutdown
    from ..store import open_store
    from .render import print_run

    try:
        pipe = load_pipeline(target)
        values = parse_assignments(list(params), pipe.params)
        if resume is None:
            pipe.graph(**values)  # validate before starting anything
        store = open_store(db)
        if resume is not None:
            try:
                values = pipe.resume_params(store, resume, values)  # before starting a cluster
            except KeyError as exc:
                raise ParameterError(f"cannot resume: {exc.args[0]}; see `airflowless runs list`") from None
            pipe.graph(**values)  # the resumed run's parameters still trace
        chosen = address or _background_cluster()
        client = init(chosen, security=True if use_tls and not chosen else _background_tls(chosen))
        try:
            result = pipe.run(values, client=client, store=store, cache=not no_cache, resume=resume,
                              raise_on_failure=False, progress=_progress)
        except ClusterLostError:  # the client's reconnect, cancelled by shutdown, would log a traceback
            logging.disable(logging.CRITICAL)  # this process is about to exit
            raise
        finally:
            with contextlib.suppress(Exception):  # a cluster that went away may not close cleanly
                shutdown()
    except RunCancelled as exc:
        name = exc.reason or signal.Signals(exc.signum).name
        click.echo(f"run {exc.run_id} cancelled by {name}; resume with: "
                   f"airflowless run {target} --resume {exc.run_id}", err=True)
        sys.exit(exc.exit_code)
    except ClusterLostError as exc:
        click.echo(f"error: the cluster at {exc.address} went away during run {exc.run_id}; start a cluster "
                   f"and resume with: airflowless run {target} --resume {exc.run_id}", err=True)
        sys.exit(1)
    except AirflowlessError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    print_run(result.record)
    if result.status != "succeeded":
        failed = [s for s in result.record.stages if s.status == "failed"]
        for stage in failed:
            click.echo(f"\n--- stage {stage.node} failed ---\n{stage.traceback or stage.error}", err=True)
        click.echo(f"\nrun {result.run_id} failed; resume with: airflowless run {target} --resume {result.run_id}",
                   err=True)
        sys.exit(1)
    if result.value is not None:
        click.echo(f"result: {result.value!r}")



def _background_tls(address: str | None) -> str | None:
    """The certificates of the cluster `airflowless cluster up --tls` started at ``address`` (None: none)."""
    from ..runtime.processes import load_state

    state = load_state() if address else None
    if state is None or state.address != address or _settings_name_tls():
        return None
    return state.tls_dir


def _progress(node: str, what: str) -> None:
    """One line on stderr as each stage starts, retries, ends: live, whether stderr is a terminal or a pipe."""
    click.echo(f"{time.strftime('%H:%M:%S')} {node}: {what}", err=True)


def _settings_name_tls() -> bool:
    """Whether AIRFLOWLESS_TLS_* name certificates (they win over the background cluster's)."""
    from ..settings import get_settings

    settings = get_settings()
    return bool(settings.tls_dir or settings.tls_ca or settings.tls_cert or settings.tls_key)


def _background_cluster() -> str | None:
    """The address of the cluster `airflowless cluster up` started, if it is up and none was named."""
    from ..runtime.processes import is_alive, load_state
    from ..settings import get_settings

    if get_settings().address:
        return None
    state = load_state()
    if state is None or not is_alive(state.scheduler_pid):
        return None
    click.echo(f"using the cluster started by `airflowless cluster up` at {state.address}", err=True)
    return state.address
