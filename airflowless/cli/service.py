"""``airflowless service``, ``deploy``, ``submit``, ``backfill``, ``deployments``, ``pools``: the service's verbs.

Every verb but ``service start`` only reads or writes the record: a service
running anywhere on it picks the change up on its next tick.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from ..errors import AirflowlessError

if TYPE_CHECKING:
    from ..store import Store

_DB = click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
_PARAM = click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE",
                      help="Set a pipeline parameter (parsed to its declared type). Repeatable.")


def _open(db: str | None) -> Store:
    from ..store import open_store

    return open_store(db)


def _fail(exc: Exception) -> None:
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _values(target: str, params: tuple[str, ...]) -> dict[str, Any]:
    from ..dag import load_pipeline
    from ..dag.params import parse_assignments

    return parse_assignments(list(params), load_pipeline(target).params)


@click.group()
def service() -> None:
    """The long-running service that runs deployments and submissions without your process."""


@service.command("start")
@click.option("--address", default=None, metavar="ADDRESS",
              help="Scheduler the runs' drivers join (default: AIRFLOWLESS_ADDRESS, else the cluster of "
                   "`airflowless cluster up`, else an embedded cluster per run).")
@_DB
@click.option("--tick", default=None, type=float, help="Seconds between two looks at the queue (default 0.25).")
@click.option("--driver-memory-mb", default=None, type=click.FloatRange(min=0, min_open=True), metavar="MIB",
              help="Stop a run whose driver's resident memory passes this (default AIRFLOWLESS_DRIVER_MEMORY_MB, "
                   "else no bound).")
@click.option("--driver-timeout", default=None, type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop a run whose driver runs longer than this (default AIRFLOWLESS_DRIVER_TIMEOUT_S, "
                   "else no bound).")
def start(address: str | None, db: str | None, tick: float | None, driver_memory_mb: float | None,
          driver_timeout: float | None) -> None:
    """Run the service in this terminal until Ctrl-C or SIGTERM (runs in flight go on)."""
    import logging

    from ..service.service import TICK_S, Service
    from ..settings import get_settings
    from .run import _background_cluster

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        url = db or get_settings().db_url
        store = _open(url)
        chosen = address or get_settings().address or _background_cluster()
        settings = get_settings()
        svc = Service(store, url, address=chosen, tick_s=tick or TICK_S,
                      driver_memory_mb=driver_memory_mb or settings.driver_memory_mb,
                      driver_timeout_s=driver_timeout or settings.driver_timeout_s,
                      warm_drivers=settings.warm_drivers)
        service_id = svc.start()
    except AirflowlessError as exc:
        _fail(exc)
        return
    click.echo(f"service {service_id} running on the record {store.url}; cluster: {chosen or 'embedded per run'}",
               err=True)
    svc.run()


@click.command()
@click.argument("target")
@click.option("--name", required=True, help="The deployment's name (letters, digits, . _ -).")
@_PARAM
@click.option("--cron", default=None, metavar="EXPR", help="A cron schedule, e.g. '0 3 * * *'.")
@click.option("--tz", "tz", default=None, metavar="ZONE", help="The cron schedule's time zone (default UTC).")
@click.option("--every", default=None, type=float, metavar="SECONDS", help="A fixed-interval schedule instead.")
@click.option("--after", "after", multiple=True, metavar="NAME[:STATE,...]",
              help="Run when a run of deployment NAME ends in STATE (default succeeded); repeat for fan-in: "
                   "when each has a new such run.")
@click.option("--pass-param", "pass_params", multiple=True, metavar="PARAM[=UPSTREAM_PARAM]",
              help="With --after: set PARAM from the followed run's parameter (of the same name, or UPSTREAM_PARAM). "
                   "Repeatable.")
@click.option("--notify", "notify", multiple=True, metavar="EVENT=CHANNEL",
              help="on_failure, on_success, on_retry or on_late = webhook:env:VARIABLE, webhook:file:PATH (the URL "
                   "stays a secret), email:ADDRESS[,ADDRESS] (AIRFLOWLESS_SMTP) or python:FUNCTION (of the "
                   "pipeline's module). Repeatable.")
@click.option("--only-if", "only_if", multiple=True, metavar="CONDITION",
              help="Start its runs only when this holds: weekdays, days=mon,wed,..., previous-succeeded (else the "
                   "run ends skipped). Repeatable.")
@click.option("--expect-every", "expect_every", default=None, metavar="DURATION",
              help="Its data is late when it started no run for this long (6h, 1d): on_late and on_failure channels "
                   "hear of it, once per silence.")
@click.option("--deadline", default=None, metavar="DURATION",
              help="A run not ended this long after it was due (30m, 2h, 1d) is late: on_late and on_failure "
                   "channels hear of it.")
@click.option("--on-new-files", "on_new_files", default=None, metavar="PATTERN",
              help="Run once per new folder (a pattern ending in '/', e.g. 's3://bucket/taxi/date=*/') or file "
                   "that matches; 'key=*' segments and {name} give fields, and `path` the match.")
@click.option("--param-from-match", "from_match", multiple=True, metavar="PARAM=FIELD",
              help="Pass the match's FIELD as parameter PARAM (fields named like a parameter pass by themselves).")
@click.option("--quiet-for", "quiet_for", type=float, default=None, metavar="SECONDS",
              help="Take a match once unchanged this long (default 0.5).")
@click.option("--marker", default=None, metavar="FILE",
              help="Take a folder once this file appears in it (e.g. _SUCCESS) instead of when it is quiet.")
@click.option("--poll", type=float, default=None, metavar="SECONDS",
              help="List the pattern this often (default: 30 for object stores; local folders: on each change, "
                   "and every 5).")
@click.option("--batch", is_flag=True, help="One run for all the new files found together (parameter field: paths).")
@click.option("--include-existing", is_flag=True, help="Also run for what matches already (default: only new ones).")
@click.option("--catchup", is_flag=True, help="After downtime, run every missed interval (default: the latest one).")
@click.option("--max-active-runs", type=int, default=None, help="At most this many of its runs at once.")
@click.option("--resume-abandoned", "resume_abandoned", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="When a run's driver dies (its machine, an OOM kill), the service resumes it, up to "
                                "N times (what it finished is reused).")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first when runs wait.")
@click.option("--pool", default=None, help="Each run takes a slot of this pool (airflowless pools set).")
@click.option("--paused", is_flag=True, help="Create it paused.")
@click.option("--replace", is_flag=True, help="Replace a deployment of the same name.")
@click.option("--upload", is_flag=True,
              help="Pack the module's folder into the storage now: every run runs this code (default: the file "
                   "as it is at each run).")
@_DB
def deploy(target: str, name: str, params: tuple[str, ...], cron: str | None, tz: str | None, every: float | None,
           after: tuple[str, ...], pass_params: tuple[str, ...], notify: tuple[str, ...], only_if: tuple[str, ...], expect_every: str | None,
           deadline: str | None,
           on_new_files: str | None, from_match: tuple[str, ...],
           quiet_for: float | None, marker: str | None, poll: float | None, batch: bool, include_existing: bool,
           catchup: bool, max_active_runs: int | None, resume_abandoned: int, priority: int, pool: str | None,
           paused: bool, replace: bool, upload: bool, db: str | None) -> None:
    """Deploy the pipeline TARGET (FILE or module, optionally :NAME) for the service to run."""
    from ..errors import ConfigError
    from ..service.deploy import deploy as record
    from ..service.files import FileSpec, parse_param_map

    try:
        files = None
        if on_new_files is not None:
            files = FileSpec.parse(on_new_files, params=parse_param_map(list(from_match)), quiet_s=quiet_for,
                                   marker=marker, poll_s=poll, batch=batch)
        elif from_match or quiet_for is not None or marker or poll is not None or batch or include_existing:
            raise ConfigError("--param-from-match, --quiet-for, --marker, --poll, --batch and --include-existing "
                              "belong to a file trigger: add --on-new-files PATTERN")
        found = record(target, name, params=_values(target, params), cron=cron, timezone_name=tz, every=every,
                       catchup=catchup, max_active_runs=max_active_runs, priority=priority, pool=pool,
                       paused=paused, replace=replace, upload=upload, after=list(after), notify=list(notify),
                       on_new_files=files, include_existing=include_existing, deadline=deadline, only_if=list(only_if), expect_every=expect_every,
                       pass_params=list(pass_params), resume_abandoned=resume_abandoned,
                       store=_open(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    due = found["next_due_at"].isoformat(timespec="seconds") if found["next_due_at"] else _when(found)
    click.echo(f"deployment {found['name']} ({found['pipeline']}): next run {due}"
               f"{' (paused)' if found['paused'] else ''}")


def _when(deployment: dict[str, Any]) -> str:
    if deployment.get("on_files"):
        from ..service.files import FileSpec

        return f"for {FileSpec.from_json(deployment['on_files']).describe()}"
    after = deployment.get("after")
    if after:
        return f"after each {'/'.join(after['states'])} run of {' and '.join(after['deployments'])}"
    return "when triggered"


@click.command()
@click.argument("target")
@_PARAM
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first when runs wait.")
@click.option("--pool", default=None, help="The run takes a slot of this pool.")
@click.option("--no-upload", is_flag=True,
              help="Load the module where it is (the service must see this file) instead of uploading its folder.")
@_DB
def submit(target: str, params: tuple[str, ...], priority: int, pool: str | None, no_upload: bool,
           db: str | None) -> None:
    """Queue one run of the pipeline TARGET for the service (its folder uploaded); print its run id and return."""
    from ..service.deploy import submit as queue

    try:
        run_id = queue(target, params=_values(target, params), priority=priority, pool=pool, upload=not no_upload,
                       store=_open(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    click.echo(run_id)
    click.echo(f"run {run_id} queued; follow it with: airflowless runs logs {run_id} --follow", err=True)


@click.command()
@click.argument("name")
@click.option("--from", "start", required=True, type=click.DateTime(), help="Start of the range (exclusive), UTC.")
@click.option("--to", "end", required=True, type=click.DateTime(), help="End of the range (inclusive), UTC.")
@click.option("--max-active-runs", type=int, default=None, help="At most this many of the backfill's runs at once.")
@click.option("--rerun", is_flag=True, help="Run again the intervals that already succeeded.")
@_DB
def backfill(name: str, start: datetime, end: datetime, max_active_runs: int | None, rerun: bool,
             db: str | None) -> None:
    """Queue one run of deployment NAME per interval of its schedule from --from to --to, oldest first."""
    from ..service.deploy import backfill as queue

    try:
        backfill_id, runs = queue(name, start, end, max_active_runs=max_active_runs, rerun=rerun, store=_open(db))
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    click.echo(f"backfill {backfill_id}: {len(runs)} run(s) queued"
               f"{f' ({runs[0]}..{runs[-1]})' if runs else ' (every interval ran already: --rerun runs them again)'}")


@click.group()
def deployments() -> None:
    """List, pause, unpause and trigger the service's deployments."""


@deployments.command("list")
@_DB
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_deployments(db: str | None, as_json: bool) -> None:
    """Each deployment: schedule, next run, paused or broken, its last runs' states (newest first)."""
    from rich.table import Table

    from ..service.schedules import Schedule
    from .render import _console, echo_json

    rows = _open(db).list_pipeline_deployments()
    if as_json:
        echo_json(rows)
        return
    grid = Table(title="deployments", title_justify="left")
    for column in ("name", "pipeline", "schedule", "next run (UTC)", "state", "last runs"):
        grid.add_column(column, overflow="fold")
    for row in rows:
        schedule = Schedule.from_json(row["schedule"]).describe() if row["schedule"] else _when(row)
        state = "broken" if row["broken"] else "paused" if row["paused"] else "active"
        grid.add_row(row["name"], row["pipeline"], schedule,
                     row["next_due_at"].isoformat(timespec="seconds") if row["next_due_at"] else "-", state,
                     " ".join(f"{r['id']}:{r['status']}" for r in row["last_runs"][:5]))
    _console().print(grid)
    for row in rows:
        if row["broken"]:
            click.echo(f"\n{row['name']} is broken: {row['broken']}\nfix it, then deploy it again with --replace")


@deployments.command("pause")
@click.argument("name")
@_DB
def pause(name: str, db: str | None) -> None:
    """Stop scheduling NAME (runs already queued or running go on)."""
    _set_paused(name, True, db)


@deployments.command("unpause")
@click.argument("name")
@_DB
def unpause(name: str, db: str | None) -> None:
    """Schedule NAME again (without catch-up, from the next tick)."""
    _set_paused(name, False, db)


def _set_paused(name: str, paused: bool, db: str | None) -> None:
    try:
        _open(db).set_deployment_paused(name, paused)
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
    click.echo(f"{name} {'paused' if paused else 'unpaused'}")


@deployments.command("trigger")
@click.argument("name")
@_PARAM
@_DB
def trigger(name: str, params: tuple[str, ...], db: str | None) -> None:
    """Queue one run of NAME now; print its run id."""
    from ..service.deploy import trigger as queue

    try:
        store = _open(db)
        values = _values(store.get_pipeline_deployment(name)["target"], params) if params else {}
        run_id = queue(name, params=values, store=store)
    except (AirflowlessError, KeyError) as exc:
        _fail(exc)
        return
    click.echo(run_id)


@click.group()
def pools() -> None:
    """Cluster-wide pools: at most SLOTS runs that take a pool run at once."""


@pools.command("set")
@click.argument("name")
@click.option("--slots", type=int, required=True)
@_DB
def set_pool(name: str, slots: int, db: str | None) -> None:
    """Create or resize pool NAME."""
    try:
        _open(db).set_pool(name, slots)
    except AirflowlessError as exc:
        _fail(exc)
    click.echo(f"pool {name}: {slots} slot(s)")


@pools.command("list")
@_DB
def list_pools(db: str | None) -> None:
    """Each pool's slots and the runs holding one now."""
    for name, pool in _open(db).list_pools().items():
        click.echo(f"{name}\t{pool['used']}/{pool['slots']}")
