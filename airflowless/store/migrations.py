"""Versioned schema migrations, applied in order when a store is opened.

Each migration is a numbered function of a connection. Opening a store applies
the ones its database has not seen, under a lock, so two processes opening the
same fresh database do not both create it. Append new migrations; never edit
one that has shipped.

To add a migration: the new tables or columns in :mod:`.schema`, then a
:class:`Migration` with the next number at the end of :data:`MIGRATIONS`
(``_create`` for tables, ``_add_columns`` for columns), and a test that opens a
record written at the previous version (as ``tests/store/test_lifecycle.py`` does for
migration 4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, inspect, select, text

from ..errors import StoreError
from . import schema
from .clock import utc_now

__all__ = ["MIGRATIONS", "Migration", "current_version", "migrate"]


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _create(*tables: str) -> Callable[[Connection], None]:
    def apply(conn: Connection) -> None:
        for name in tables:
            schema.metadata.tables[name].create(conn, checkfirst=True)

    return apply


def _add_columns(table: str, *columns: str) -> Callable[[Connection], None]:
    # A database created after these columns joined schema.py has them already.
    def apply(conn: Connection) -> None:
        present = {c["name"] for c in inspect(conn).get_columns(table)}
        for name in columns:
            if name in present:
                continue
            column = schema.metadata.tables[table].c[name]
            kind = column.type.compile(dialect=conn.dialect)
            conn.execute(text(f'ALTER TABLE {table} ADD COLUMN "{name}" {kind}'))

    return apply


def _create_indexes(table: str, *names: str) -> Callable[[Connection], None]:
    # indexes of columns added later (a database created after they joined schema.py has them)
    def apply(conn: Connection) -> None:
        for index in schema.metadata.tables[table].indexes:
            if index.name in names:
                index.create(conn, checkfirst=True)

    return apply


def _steps(*steps: Callable[[Connection], None]) -> Callable[[Connection], None]:
    def apply(conn: Connection) -> None:
        for step in steps:
            step(conn)

    return apply


_QUEUE_COLUMNS = ("target", "deployment_id", "trigger", "priority", "pool", "interval_start", "interval_end", "rerun",
                  "queue_reason", "claimed_by", "claimed_at", "backfill_id")

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "pipeline runs and stage runs", _create("pipeline_runs", "stage_runs")),
    Migration(2, "experiments, trials, metrics per step, checkpoints",
              _create("experiments", "trials", "metrics", "checkpoints")),
    Migration(3, "deployments", _create("deployments")),
    Migration(4, "run drivers (host, pid, start time), heartbeats, resumed_by",
              _add_columns("pipeline_runs", "driver_host", "driver_pid", "driver_started", "heartbeat_at",
                           "resumed_by")),
    Migration(5, "experiments' summary (the prepared-data cache's use)", _add_columns("experiments", "summary")),
    Migration(6, "stage runs' logs", _add_columns("stage_runs", "log_uri")),
    Migration(7, "the service: pipeline deployments, pools, backfills, services; what started a run",
              _steps(_add_columns("pipeline_runs", *_QUEUE_COLUMNS),
                     _create_indexes("pipeline_runs", "uq_runs_deployment_interval", "ix_pipeline_runs_deployment_id",
                                     "ix_pipeline_runs_backfill_id"),
                     _create("pipeline_deployments", "pools", "backfills", "services"))),
    Migration(8, "deployments that follow other deployments' runs",
              _steps(_add_columns("pipeline_runs", "upstream_run", "upstream_runs"),
                     _add_columns("pipeline_deployments", "after"),
                     _create_indexes("pipeline_runs", "uq_runs_deployment_upstream"))),
    Migration(9, "notifications of runs' ends", _steps(_add_columns("pipeline_deployments", "notify"),
                                                        _create("notifications"))),
    Migration(10, "file and partition triggers (what each deployment saw and took); deadlines, late data and their "
                  "alerts; run conditions",
              _steps(_add_columns("pipeline_deployments", "on_files", "deadline_s", "expect_every_s", "conditions"),
                     _add_columns("pipeline_runs", "trigger_detail", "started_at"),
                     _create("trigger_seen", "deployment_alerts"))),
    Migration(11, "the model registry: models, versions, aliases (with their history)",
              _create("registered_models", "model_versions", "model_aliases")),
    Migration(12, "the registered model versions each serve deployment serves; versions' datasets and code",
              _steps(_add_columns("deployments", "models"), _add_columns("model_versions", "datasets", "code_version"))),
    Migration(13, "the pipeline run and stage that started each experiment",
              _steps(_add_columns("experiments", "run_id", "stage"), _create_indexes("experiments", "ix_experiments_run_id"))),
    Migration(14, "deployments whose runs the service resumes when their driver dies",
              _add_columns("pipeline_deployments", "resume_abandoned")),
    Migration(15, "the copy of a service driver's log in the run's storage", _add_columns("pipeline_runs", "driver_log_uri")),
)


def current_version(conn: Connection) -> int:
    """The highest migration applied to this database (0 for an empty one)."""
    if not inspect(conn).has_table(schema.schema_version.name):
        return 0
    found = conn.execute(select(schema.schema_version.c.version)).scalars().all()
    return max(found, default=0)


def migrate(engine: Engine) -> int:
    """Bring the database to the latest schema; return the version it is at.

    A record that cannot be written here (:func:`.engine.read_only`) is read as it is, if it is at the latest
    version already."""
    from .engine import read_only

    if read_only(engine):
        with engine.connect() as conn:
            version = current_version(conn)
        latest = MIGRATIONS[-1].version
        if version != latest:
            raise StoreError(f"the record at {engine.url.database} is read-only here and at schema version "
                             f"{version}, but this airflowless reads version {latest}: open it once where it can "
                             "be written (it is upgraded then), or read it with the airflowless that wrote it")
        return version
    # SQLite transactions take the write lock up front (see engine.py), so two
    # openers serialise there; PostgreSQL needs an explicit lock.
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(7412201)"))
        schema.schema_version.create(conn, checkfirst=True)
        version = current_version(conn)
        for migration in MIGRATIONS:
            if migration.version <= version:
                continue
            migration.apply(conn)
            conn.execute(
                schema.schema_version.insert().values(
                    version=migration.version,
                    applied_at=utc_now(),
                    description=migration.description,
                )
            )
            version = migration.version
    return version
