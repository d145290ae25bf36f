"""The record store: pipeline runs and stage runs (experiments and deployments in mixins), in SQLite or PostgreSQL.

>>> from airflowless.store import open_store
>>> store = open_store("sqlite://")            # in memory, for a quick look
>>> run_id = store.create_run("demo", module="demo.py", params={"n": 1})
>>> store.get_run(run_id).status
'running'

One writer per run: the driver that runs a pipeline writes its rows. Each
method is one short transaction, so concurrent runs from several processes
interleave without losing rows. A run records its driver (host, pid, start
time) and a heartbeat; a ``running`` run whose driver is gone is read as
``abandoned`` (:mod:`.liveness`). Resuming a run claims it with one
compare-and-set on its row, so two processes never resume the same run at once.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Engine, and_, bindparam, desc, func, select
from sqlalchemy.engine import make_url

from ..errors import ConfigError, ResumeError, StoreError
from ..jsonsafe import require_finite
from . import schema
from .clock import aware, utc_now
from .deployments import DeploymentRecords
from .engine import make_engine
from .experiments import ExperimentRecords
from .liveness import Driver, this_driver
from .migrations import migrate
from .models import ModelRecords
from .notifications import NotificationRecords
from .records import RunRecord, RunStatus, StageRecord, StageStatus, run_from_row
from .service import ServiceRecords
from .triggers import TriggerRecords

__all__ = ["Store", "open_store"]

_RUN_FIELDS = {"status", "finished_at", "error", "address", "heartbeat_at"}
_STAGE_FIELDS = {
    "status", "task_key", "attempts", "worker", "started_at", "finished_at", "duration_s",
    "output_uri", "output_summary", "reused_from_run", "error", "traceback", "upstream", "log_uri",
}


def _to_utc(fields: dict[str, Any]) -> dict[str, Any]:
    # SQLite would keep an aware datetime's wall time and drop its offset.
    return {k: v.astimezone(timezone.utc) if isinstance(v, datetime) and v.tzinfo is not None else v
            for k, v in fields.items()}


class Store(ExperimentRecords, DeploymentRecords, ServiceRecords, TriggerRecords, NotificationRecords,
            ModelRecords):
    """The record of runs. Build with :func:`open_store`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.version = migrate(engine)

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def shared(self) -> bool:
        """Whether other processes can read this store (not so for an in-memory SQLite)."""
        url = self.engine.url
        return url.get_backend_name() != "sqlite" or url.database not in (None, "", ":memory:")

    # -- pipeline runs -------------------------------------------------------
    def create_run(
        self,
        pipeline: str,
        *,
        module: str,
        params: dict[str, Any],
        address: str | None = None,
        resumed_from: int | None = None,
        driver: Driver | None = None,
    ) -> int:
        """Record a new run in state ``running``, driven by ``driver`` (default: this process); return its id.

        With ``resumed_from``, the earlier run is claimed in the same transaction:
        :class:`~airflowless.errors.ResumeError` if its driver is alive or another
        live run resumes it. An abandoned earlier run is settled as ``abandoned``.
        Parameters holding NaN or infinity are refused (JSON cannot keep them).
        """
        require_finite(params, what="parameter")
        driver = driver or this_driver()
        now = utc_now()
        with self.engine.begin() as conn:
            earlier = None if resumed_from is None else self._claimable(conn, resumed_from)
            result = conn.execute(
                schema.pipeline_runs.insert().values(
                    pipeline=pipeline, module=module, params=params, status=RunStatus.RUNNING,
                    address=address, resumed_from=resumed_from, created_at=now, started_at=now, heartbeat_at=now,
                    driver_host=driver.host, driver_pid=driver.pid, driver_started=driver.started,
                )
            )
            (run_id,) = result.inserted_primary_key or (None,)
            if run_id is None:
                raise StoreError("the database did not return an id for the new run")
            if earlier is not None:
                self._claim(conn, earlier, int(run_id))
        return int(run_id)

    def resume_blocker(self, run_id: int) -> str | None:
        """Why run ``run_id`` cannot be resumed now, or None; :class:`KeyError` if there is no such run."""
        try:
            with self.engine.begin() as conn:
                self._claimable(conn, run_id)
        except ResumeError as exc:
            return str(exc)
        return None

    def _claimable(self, conn: Connection, run_id: int) -> RunRecord:
        row = conn.execute(select(schema.pipeline_runs).where(schema.pipeline_runs.c.id == run_id)).mappings().first()
        if row is None:
            raise KeyError(f"no run with id {run_id} in the store at {self.url}")
        earlier = run_from_row(row, [])
        if earlier.status == RunStatus.RUNNING:
            raise ResumeError(
                f"run {run_id} is still running (driver pid {earlier.driver_pid} on {earlier.driver_host}); "
                "wait for it to end, or stop it (Ctrl-C or kill), then resume it"
            )
        if earlier.resumed_by is not None:
            claimer = conn.execute(
                select(schema.pipeline_runs).where(schema.pipeline_runs.c.id == earlier.resumed_by)
            ).mappings().first()
            if claimer is not None and run_from_row(claimer, []).status == RunStatus.RUNNING:
                raise ResumeError(
                    f"run {run_id} is being resumed by run {earlier.resumed_by} (driver pid "
                    f"{claimer['driver_pid']} on {claimer['driver_host']}); wait for that run, or resume it instead"
                )
        return earlier

    def _claim(self, conn: Connection, earlier: RunRecord, run_id: int) -> None:
        """Compare-and-set ``resumed_by`` from what :meth:`_claimable` saw to ``run_id``."""
        table = schema.pipeline_runs
        seen = table.c.resumed_by.is_(None) if earlier.resumed_by is None else table.c.resumed_by == earlier.resumed_by
        fields: dict[str, Any] = {"resumed_by": run_id}
        if earlier.status == RunStatus.ABANDONED:  # say so for good now that another run takes over
            fields.update(status=RunStatus.ABANDONED, finished_at=earlier.finished_at or utc_now(),
                          error=earlier.error or "the driver died before the run ended")
        claimed = conn.execute(table.update().where(and_(table.c.id == earlier.id, seen)).values(**fields))
        if claimed.rowcount != 1:
            raise ResumeError(
                f"run {earlier.id} was claimed by another process resuming it at the same time; "
                "see `airflowless runs list`"
            )
        if earlier.status == RunStatus.ABANDONED:
            self._settle_stages(conn, earlier.id, StageStatus.ABANDONED, StageStatus.ABANDONED,
                                "the driver died before the stage ended")

    def heartbeat(self, run_id: int) -> None:
        """The driver of ``run_id`` is alive (called every few seconds while it runs)."""
        self.update_run(run_id, heartbeat_at=utc_now())

    def finish_run(self, run_id: int, status: str, *, error: str | None = None,
                   stage_error: str | None = None) -> None:
        """End the run in ``status``, settling every stage still pending or running.

        Unless the run succeeded, running stages take the run's end (``failed``,
        ``cancelled``, with ``stage_error``) and pending ones are ``skipped``
        (``cancelled`` if the run was).
        """
        if status not in RunStatus.TERMINAL:
            raise ConfigError(f"a finished run's status is one of {sorted(RunStatus.TERMINAL)}, got {status!r}")
        with self.engine.begin() as conn:
            if status != RunStatus.SUCCEEDED:
                pending = StageStatus.SKIPPED if status == RunStatus.FAILED else status
                self._settle_stages(conn, run_id, status, pending, stage_error or error or f"the run ended {status}")
            conn.execute(schema.pipeline_runs.update().where(schema.pipeline_runs.c.id == run_id)
                         .values(status=status, error=error, finished_at=utc_now()))

    @staticmethod
    def _settle_stages(conn: Connection, run_id: int, running: str, pending: str, error: str) -> None:
        table = schema.stage_runs
        now = utc_now()
        for before, after in ((StageStatus.RUNNING, running), (StageStatus.PENDING, pending)):
            conn.execute(table.update().where(and_(table.c.run_id == run_id, table.c.status == before))
                         .values(status=after, finished_at=now, error=error))

    def update_run(self, run_id: int, **fields: Any) -> None:
        unknown = set(fields) - _RUN_FIELDS
        if unknown:
            raise TypeError(f"update_run got unknown fields {sorted(unknown)}")
        with self.engine.begin() as conn:
            conn.execute(
                schema.pipeline_runs.update().where(schema.pipeline_runs.c.id == run_id).values(**_to_utc(fields))
            )

    def get_run(self, run_id: int) -> RunRecord:
        """The run with its stages; :class:`KeyError` if there is none."""
        with self.engine.begin() as conn:
            row = conn.execute(
                select(schema.pipeline_runs).where(schema.pipeline_runs.c.id == run_id)
            ).mappings().first()
            if row is None:
                raise KeyError(f"no run with id {run_id} in the store at {self.url}")
            stages = conn.execute(
                select(schema.stage_runs)
                .where(schema.stage_runs.c.run_id == run_id)
                .order_by(schema.stage_runs.c.id)
            ).mappings().all()
        return run_from_row(row, [self._stage(s) for s in stages])

    def list_runs(self, *, limit: int = 50, pipeline: str | None = None) -> list[RunRecord]:
        """The latest runs first (without their stages)."""
        query = select(schema.pipeline_runs).order_by(desc(schema.pipeline_runs.c.id)).limit(limit)
        if pipeline is not None:
            query = query.where(schema.pipeline_runs.c.pipeline == pipeline)
        with self.engine.begin() as conn:
            rows = conn.execute(query).mappings().all()
        return [run_from_row(row, []) for row in rows]

    def count_runs(self) -> int:
        with self.engine.begin() as conn:
            return int(conn.execute(select(func.count()).select_from(schema.pipeline_runs)).scalar_one())

    # -- stage runs ----------------------------------------------------------
    def add_stages(self, run_id: int, stages: list[dict[str, Any]]) -> None:
        """Record the stages of a run (``node``, ``stage``, ``upstream``, ``cache_key``, ``status``...)."""
        rows = [{"run_id": run_id, "attempts": 0, **stage} for stage in stages]
        for row in rows:
            unknown = set(row) - _STAGE_FIELDS - {"run_id", "node", "stage", "upstream", "cache_key"}
            if unknown:
                raise TypeError(f"add_stages got unknown fields {sorted(unknown)}")
        columns = set().union(*rows)  # an executemany takes its columns from the first row
        rows = [_to_utc({column: row.get(column) for column in columns}) for row in rows]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(schema.stage_runs.insert(), rows)

    def update_stage(self, run_id: int, node: str, **fields: Any) -> None:
        self.update_stages(run_id, {node: fields})

    def update_stages(self, run_id: int, updates: dict[str, dict[str, Any]]) -> None:
        """Change fields of several stage runs of ``run_id`` (node -> fields) in one transaction."""
        for fields in updates.values():
            unknown = set(fields) - _STAGE_FIELDS
            if unknown:
                raise TypeError(f"update_stage got unknown fields {sorted(unknown)}")
        table = schema.stage_runs
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}  # one statement per set of changed columns
        for node, fields in updates.items():
            if fields:
                by_columns.setdefault(tuple(sorted(fields)), []).append(
                    {**{f"new_{k}": v for k, v in _to_utc(fields).items()}, "the_run": run_id, "the_node": node})
        with self.engine.begin() as conn:
            for columns, rows in by_columns.items():
                statement = (table.update()
                             .where(and_(table.c.run_id == bindparam("the_run"), table.c.node == bindparam("the_node")))
                             .values({column: bindparam(f"new_{column}") for column in columns}))
                conn.execute(statement, rows)

    def find_output(self, cache_key: str, *, run_id: int | None = None) -> StageRecord | None:
        """The latest finished stage run with this cache key (in ``run_id`` if given)."""
        return self.find_outputs([cache_key], run_id=run_id).get(cache_key)

    def find_outputs(self, cache_keys: list[str], *, run_id: int | None = None) -> dict[str, StageRecord]:
        """:meth:`find_output` for many keys at once: key -> the latest finished stage run with it."""
        table = schema.stage_runs
        found: dict[str, StageRecord] = {}
        unique = sorted(set(cache_keys))
        with self.engine.begin() as conn:
            for start in range(0, len(unique), 500):  # bounded IN lists
                latest = (
                    select(func.max(table.c.id))
                    .where(table.c.cache_key.in_(unique[start:start + 500]))
                    .where(table.c.status.in_(sorted(StageStatus.DONE)))
                    .where(table.c.output_uri.is_not(None))
                    .group_by(table.c.cache_key)
                )
                if run_id is not None:
                    latest = latest.where(table.c.run_id == run_id)
                for row in conn.execute(select(table).where(table.c.id.in_(latest))).mappings():
                    found[row["cache_key"]] = self._stage(row)  # one row per key: its latest
        return found

    # -- rows to records -----------------------------------------------------
    @staticmethod
    def _stage(row: Any) -> StageRecord:
        data = dict(row)
        data.pop("id", None)
        for key in ("started_at", "finished_at"):
            data[key] = aware(data[key])
        return StageRecord(**data)

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | None = None) -> Store:
    """Open (and migrate) the store at ``url``, or (inside a stage) its run's, or at ``AIRFLOWLESS_DB`` / the
    default SQLite file."""
    if url is None:
        from .current import default_record

        url = default_record()  # inside a stage: its run's record (:mod:`.current`)
    if url is None:
        from ..private import secure_roots
        from ..settings import get_settings

        secure_roots()  # the default record lives in $AIRFLOWLESS_HOME: private to this user
        url = get_settings().db_url
    try:
        return Store(make_engine(url))
    except StoreError:
        raise
    except Exception as exc:
        shown = make_url(url).render_as_string(hide_password=True)  # parsed by make_engine already
        raise StoreError(f"cannot open the store at {shown!r}: {exc}") from exc
