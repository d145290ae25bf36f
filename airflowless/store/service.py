"""The record of the service: pipeline deployments, the queue of runs, pools, backfills, the services.

Used through :class:`~airflowless.store.store.Store` (this is a mixin of it).
The queue is the ``pipeline_runs`` table itself: a run the service will start
is written ``queued`` (with what started it: a schedule's tick, a backfill, a
submission, a manual trigger) and gets its run id at once. Three steps keep
every due run started exactly once, whatever number of services share the
record and whenever one is killed:

1. :meth:`ServiceRecords.schedule_due` writes the due intervals' runs and moves
   the deployments' next due time in one transaction; a unique index on
   (deployment, interval start, rerun) refuses an interval written twice;
2. :meth:`ServiceRecords.claim_runs` picks the queued runs that may start now
   (priority, then age; under each deployment's and backfill's
   ``max_active_runs`` and each pool's slots) and marks them claimed by the
   calling service, in one transaction under the record's lock (PostgreSQL:
   an advisory lock; SQLite: its write lock);
3. the driver the service starts takes its run with a compare-and-set from
   ``queued`` to ``running`` (:meth:`ServiceRecords.take_queued_run`): two
   drivers for one run (a claim given up when its service died, then claimed
   again) cannot both start it.

A claim whose service died before its driver took the run goes back to the
queue (:meth:`ServiceRecords.release_orphans`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, and_, func, or_, select, text
from sqlalchemy.exc import IntegrityError

from ..errors import ConfigError, ResumeError
from . import schema
from .clock import aware, utc_now
from .liveness import Driver, driver_alive
from .records import RunRecord, RunStatus, StageStatus, run_from_row

if TYPE_CHECKING:
    from ..service.schedules import Schedule

__all__ = ["ServiceRecords", "Trigger", "CATCHUP_LIMIT"]

CATCHUP_LIMIT = 1000
"""The most intervals one pass of the scheduler writes for one deployment (the rest in the next passes)."""

_QUEUE_LOCK = 7412202  # PostgreSQL advisory lock of the scheduler's and dispatcher's transactions


class Trigger:
    """What started a run the service ran."""

    SCHEDULE = "schedule"
    BACKFILL = "backfill"
    SUBMIT = "submit"
    MANUAL = "manual"
    AFTER = "after"  # another deployment's run ended
    FILES = "files"  # a new file or partition (airflowless.service.files)
    RESUME = "resume"  # an earlier run's driver died (deploy --resume-abandoned)


def _lock(conn: Connection, key: int = _QUEUE_LOCK) -> None:
    """Serialise decisions across processes under PostgreSQL advisory lock ``key`` (the queue's by default);
    SQLite's BEGIN IMMEDIATE already does."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SELECT pg_advisory_xact_lock({key})"))


class ServiceRecords:
    engine: Engine
    _settle_stages: Callable[[Connection, int, str, str, str], None]  # the Store's

    # -- deployments -----------------------------------------------------------
    def create_pipeline_deployment(self, name: str, *, pipeline: str, target: str, params: dict[str, Any],
                                   schedule: Schedule | None, catchup: bool = False,
                                   max_active_runs: int | None = None, priority: int = 0, pool: str | None = None,
                                   paused: bool = False, replace: bool = False, now: datetime | None = None,
                                   after: dict[str, Any] | None = None,
                                   notify: list[dict[str, str]] | None = None,
                                   on_files: dict[str, Any] | None = None, deadline_s: float | None = None,
                                   conditions: list[dict[str, Any]] | None = None,
                                   expect_every_s: float | None = None, resume_abandoned: int = 0) -> int:
        """Record deployment ``name``; :class:`ConfigError` if the name is taken (unless ``replace``).

        ``after``: ``{"deployments": [names], "states": [run states]}``: it runs when a run of each of those
        deployments ends in one of the states (instead of on a schedule); a cycle is refused. ``on_files``:
        a :class:`~airflowless.service.files.FileSpec` as JSON: it runs once per new file or partition.
        ``deadline_s``: a run not ended that long after it was due is late (:mod:`airflowless.service.notify`).
        ``conditions``: its runs start only when they hold (:mod:`airflowless.service.conditions`).
        ``expect_every_s``: no run started for that long means its data is late (notified).
        ``resume_abandoned``: how many times the service resumes a run of it whose driver died
        (:meth:`resume_abandoned_runs`).
        """
        now = now or utc_now()
        table = schema.pipeline_deployments
        triggers = [what for what, given in (("a schedule", schedule), ("--after", after), ("--on-new-files", on_files))
                    if given is not None]
        if len(triggers) > 1:
            raise ConfigError(f"a deployment has one trigger: a schedule, --after or --on-new-files; got "
                              f"{' and '.join(triggers)}")
        values = dict(pipeline=pipeline, target=target, params=params,
                      schedule=schedule.to_json() if schedule else None, catchup=int(catchup),
                      max_active_runs=max_active_runs, priority=priority, pool=pool, paused=int(paused),
                      next_due_at=schedule.next_after(now) if schedule else None, broken=None, updated_at=now,
                      after=after, notify=notify, on_files=on_files, deadline_s=deadline_s, conditions=conditions,
                      expect_every_s=expect_every_s, resume_abandoned=resume_abandoned)
        with self.engine.begin() as conn:
            _lock(conn)
            if pool is not None:
                self._check_pool(conn, pool)
            if after is not None:
                _check_after(conn, name, after)
            found = conn.execute(select(table.c.id).where(table.c.name == name)).scalar()
            if found is not None:
                if not replace:
                    raise ConfigError(f"a deployment named {name!r} exists; choose another name, or replace it "
                                      "with --replace (its runs stay in the record)")
                conn.execute(table.update().where(table.c.id == found).values(**values))
                return int(found)
            try:
                result = conn.execute(table.insert().values(name=name, created_at=now, **values))
            except IntegrityError:
                raise ConfigError(f"a deployment named {name!r} was just created by someone else") from None
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def get_pipeline_deployment(self, name: str) -> dict[str, Any]:
        """Deployment ``name``; :class:`KeyError` naming the ones there are if none has it."""
        table = schema.pipeline_deployments
        with self.engine.begin() as conn:
            row = conn.execute(select(table).where(table.c.name == name)).mappings().first()
            if row is None:
                names = conn.execute(select(table.c.name).order_by(table.c.name)).scalars().all()
                raise KeyError(f"no deployment named {name!r}; there are {list(names) or 'none'} "
                               "(see `airflowless deployments list`)")
        return _deployment(row)

    def list_pipeline_deployments(self) -> list[dict[str, Any]]:
        """Every deployment, by name, with its last runs (newest first, at most 10): each run's state and its
        stages' (``{"node", "status"}`` in the order they were recorded; a mapped stage's items are left to
        the run's page, the mapped stage says how they went)."""
        table, runs, stages = schema.pipeline_deployments, schema.pipeline_runs, schema.stage_runs
        with self.engine.begin() as conn:
            rows = [_deployment(row) for row in conn.execute(select(table).order_by(table.c.name)).mappings()]
            for row in rows:
                last = conn.execute(select(runs.c.id, runs.c.status, runs.c.trigger, runs.c.interval_end)
                                    .where(runs.c.deployment_id == row["id"])
                                    .order_by(runs.c.id.desc()).limit(10)).mappings().all()
                row["last_runs"] = [{**r, "stages": []} for r in last]
            by_run = {run["id"]: run for row in rows for run in row["last_runs"]}
            for start in range(0, len(by_run), 500):  # bounded IN lists
                chunk = list(by_run)[start:start + 500]
                found = conn.execute(select(stages.c.run_id, stages.c.node, stages.c.status)
                                     .where(and_(stages.c.run_id.in_(chunk),
                                                 ~stages.c.node.like("%[%]")))  # items: score[3] (dag.mapping)
                                     .order_by(stages.c.id))
                for run_id, node, status in found:
                    by_run[run_id]["stages"].append({"node": node, "status": status})
        return rows

    def set_deployment_paused(self, name: str, paused: bool, *, now: datetime | None = None) -> None:
        """Pause or unpause ``name``. Unpausing without catch-up moves its next due time past ``now``: the
        ticks it slept through do not run (with catch-up, they do)."""
        from ..service.schedules import Schedule

        deployment = self.get_pipeline_deployment(name)
        table = schema.pipeline_deployments
        values: dict[str, Any] = {"paused": int(paused), "updated_at": utc_now()}
        if not paused and deployment["schedule"] and not deployment["catchup"]:
            values["next_due_at"] = Schedule.from_json(deployment["schedule"]).next_after(now or utc_now())
        with self.engine.begin() as conn:
            conn.execute(table.update().where(table.c.id == deployment["id"]).values(**values))

    def mark_deployment_broken(self, deployment_id: int, error: str | None) -> None:
        """Say why the service cannot run a deployment (None: it can again)."""
        table = schema.pipeline_deployments
        with self.engine.begin() as conn:
            conn.execute(table.update().where(table.c.id == deployment_id).values(broken=error, updated_at=utc_now()))

    # -- pools -----------------------------------------------------------------
    def set_pool(self, name: str, slots: int) -> None:
        """Create or resize pool ``name``: at most ``slots`` runs that take it run at once, cluster-wide."""
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
            raise ConfigError(f"a pool's slots are a whole number from 0 up, got {slots!r}")
        table = schema.pools
        with self.engine.begin() as conn:
            if conn.execute(select(table.c.name).where(table.c.name == name)).first() is None:
                conn.execute(table.insert().values(name=name, slots=slots, updated_at=utc_now()))
            else:
                conn.execute(table.update().where(table.c.name == name).values(slots=slots, updated_at=utc_now()))

    def list_pools(self) -> dict[str, dict[str, int]]:
        """Pool name -> its slots and the runs holding one now."""
        with self.engine.begin() as conn:
            slots = {row.name: row.slots for row in conn.execute(select(schema.pools))}
            used = _active_counts(conn, time.time())[2]
        return {name: {"slots": n, "used": used.get(name, 0)} for name, n in sorted(slots.items())}

    @staticmethod
    def _check_pool(conn: Connection, pool: str) -> None:
        if conn.execute(select(schema.pools.c.name).where(schema.pools.c.name == pool)).first() is None:
            raise ConfigError(f"no pool named {pool!r}; create it first: airflowless pools set {pool} --slots N")

    # -- the queue -------------------------------------------------------------
    def enqueue_run(self, pipeline: str, *, target: str, params: dict[str, Any], trigger: str,
                    deployment_id: int | None = None, priority: int = 0, pool: str | None = None,
                    interval: tuple[datetime, datetime] | None = None, rerun: int = 0,
                    backfill_id: int | None = None) -> int:
        """Queue a run for the service; its id. :class:`ConfigError` if that interval was queued already."""
        with self.engine.begin() as conn:
            if pool is not None:
                self._check_pool(conn, pool)
            run_id = _insert_queued(conn, pipeline, target=target, params=params, trigger=trigger,
                                    deployment_id=deployment_id, priority=priority, pool=pool, interval=interval,
                                    rerun=rerun, backfill_id=backfill_id)
        if run_id is None:
            raise ConfigError(f"the interval {interval} of deployment {deployment_id} was queued already")
        return run_id

    def schedule_due(self, now: datetime) -> list[int]:
        """Queue a run for each due interval of each unpaused, working deployment; the new runs' ids.

        Without catch-up only the latest due interval runs (after downtime: one
        run, not one per missed tick); with it, each (at most
        :data:`CATCHUP_LIMIT` per pass). Each deployment's next due time moves
        past ``now`` in the same transaction.
        """
        from ..service.schedules import Schedule

        table = schema.pipeline_deployments
        queued: list[int] = []
        with self.engine.begin() as conn:
            _lock(conn)
            due = conn.execute(select(table).where(and_(table.c.next_due_at <= now, table.c.paused == 0,
                                                        table.c.broken.is_(None)))).mappings().all()
            for row in due:
                schedule = Schedule.from_json(row["schedule"])
                first: datetime = aware(row["next_due_at"])  # type: ignore[assignment]
                if row["catchup"]:
                    ticks = [first, *itertools.islice(schedule.ticks(first, now), CATCHUP_LIMIT)]
                else:  # the latest tick that is due
                    ticks = [max(first, schedule.previous(schedule.next_after(now)))]
                for tick in ticks[:CATCHUP_LIMIT]:
                    run_id = _insert_queued(conn, row["pipeline"], target=row["target"], params=row["params"],
                                            trigger=Trigger.SCHEDULE, deployment_id=row["id"],
                                            priority=row["priority"], pool=row["pool"],
                                            interval=schedule.interval(tick), rerun=0, backfill_id=None)
                    if run_id is not None:
                        queued.append(run_id)
                later = schedule.next_after(ticks[CATCHUP_LIMIT - 1]) if len(ticks) > CATCHUP_LIMIT \
                    else schedule.next_after(now)
                conn.execute(table.update().where(table.c.id == row["id"]).values(next_due_at=later))
        return queued

    def queue_followers(self) -> list[int]:
        """Queue a run of each deployment that follows others (``after``) for each upstream run that ended
        in one of its states since it was deployed; the new runs' ids.

        One upstream: one run per upstream run, oldest first, with the upstream run's data interval (a chain
        over intervals). Several (fan-in): one run once each upstream has a new run in the states since the
        last one this deployment followed, with none of their intervals. The unique index on (deployment,
        upstream run) keeps any upstream run from being followed twice, by any number of services.
        """
        table, runs = schema.pipeline_deployments, schema.pipeline_runs
        queued: list[int] = []
        with self.engine.begin() as conn:
            followers = [row for row in conn.execute(select(table).where(and_(
                table.c.after.is_not(None), table.c.paused == 0, table.c.broken.is_(None)))).mappings()
                if row["after"]]  # (a JSON null written before the column kept None as SQL NULL)
            if not followers:
                return []
            _lock(conn)
            ids = {row.name: row.id for row in conn.execute(select(table.c.name, table.c.id))}
            for row in followers:
                after = row["after"]
                upstream = [name for name in after["deployments"] if name in ids]
                if len(upstream) != len(after["deployments"]):
                    continue  # an upstream deployment was removed: nothing to follow
                followed = _last_followed(conn, row["id"])
                found = {name: conn.execute(
                    select(runs.c.id, runs.c.interval_start, runs.c.interval_end, runs.c.rerun, runs.c.params)
                    .where(and_(runs.c.deployment_id == ids[name], runs.c.status.in_(after["states"]),
                                runs.c.finished_at >= row["created_at"], runs.c.id > followed.get(name, 0)))
                    .order_by(runs.c.id)).all() for name in upstream}
                picks: list[tuple[dict[str, int], Any]] = []
                if len(upstream) == 1:
                    (name,) = upstream
                    picks = [({name: r.id}, r) for r in found[name]]
                elif all(found.values()):
                    picks = [({name: found[name][-1].id for name in upstream}, None)]
                for chosen, single in picks:
                    interval = (single.interval_start, single.interval_end) if single is not None and \
                        single.interval_start is not None else None
                    passed = {name: (single.params or {})[up] for name, up in (after.get("pass") or {}).items()
                              if single is not None and up in (single.params or {})}
                    run_id = _insert_queued(conn, row["pipeline"], target=row["target"],
                                            params={**row["params"], **passed},
                                            trigger=Trigger.AFTER, deployment_id=row["id"],
                                            priority=row["priority"], pool=row["pool"], interval=interval,
                                            rerun=(single.rerun or 0) if interval else 0, backfill_id=None,
                                            upstream=chosen)
                    if run_id is not None:
                        queued.append(run_id)
        return queued

    def claim_runs(self, service_id: int, *, now: datetime | None = None, limit: int = 100) -> list[RunRecord]:
        """The queued runs that may start now (at most ``limit``), claimed for service ``service_id``; the
        others say why they wait. Every queued run is considered, so runs held by a full pool or a limit
        never block those behind them."""
        runs, deployments, backfills = schema.pipeline_runs, schema.pipeline_deployments, schema.backfills
        now = now or utc_now()
        claimed: list[int] = []
        with self.engine.begin() as conn:
            _lock(conn)
            waiting = conn.execute(select(runs.c.id, runs.c.deployment_id, runs.c.backfill_id, runs.c.pool,
                                          runs.c.queue_reason, runs.c.interval_end, runs.c.created_at, runs.c.trigger)
                                   .where(and_(runs.c.status == RunStatus.QUEUED, runs.c.claimed_by.is_(None)))
                                   .order_by(runs.c.priority.desc(), runs.c.id)).mappings().all()
            if not waiting:
                return []
            by_deployment, by_backfill, by_pool = _active_counts(conn, time.time())
            limits: dict[int, int | None] = {}
            conditions: dict[int, tuple[list[dict[str, Any]], str]] = {}
            for deployment in conn.execute(select(deployments.c.id, deployments.c.max_active_runs,
                                                  deployments.c.conditions, deployments.c.schedule)):
                limits[deployment.id] = deployment.max_active_runs
                if deployment.conditions:
                    zone = (deployment.schedule or {}).get("timezone") or "UTC"
                    conditions[deployment.id] = (deployment.conditions, zone)
            backfill_limits = {row.id: row.max_active_runs for row in conn.execute(
                select(backfills.c.id, backfills.c.max_active_runs).where(backfills.c.status == "running"))}
            slots = {row.name: row.slots for row in conn.execute(select(schema.pools))}
            reasons: dict[int, str] = {}
            for row in waiting:
                if len(claimed) >= limit:
                    break
                if row["deployment_id"] in conditions and row["trigger"] != Trigger.MANUAL:
                    decided = _check_conditions(conn, row, *conditions[row["deployment_id"]])
                    if decided is not None and decided[0] == "skip":
                        conn.execute(runs.update().where(runs.c.id == row["id"]).values(
                            status=RunStatus.SKIPPED, error=decided[1], finished_at=now, queue_reason=None))
                        continue
                    if decided is not None:
                        if row["queue_reason"] != decided[1]:
                            reasons[row["id"]] = decided[1]
                        continue
                reason = _why_wait(row, by_deployment, by_backfill, by_pool, limits, backfill_limits, slots)
                if reason is not None:
                    if row["queue_reason"] != reason:
                        reasons[row["id"]] = reason
                    continue
                conn.execute(runs.update().where(runs.c.id == row["id"])
                             .values(claimed_by=service_id, claimed_at=now, queue_reason="starting its driver"))
                if row["backfill_id"] is not None:
                    by_backfill[row["backfill_id"]] = by_backfill.get(row["backfill_id"], 0) + 1
                elif row["deployment_id"] is not None:
                    by_deployment[row["deployment_id"]] = by_deployment.get(row["deployment_id"], 0) + 1
                if row["pool"] is not None:
                    by_pool[row["pool"]] = by_pool.get(row["pool"], 0) + 1
                claimed.append(row["id"])
            for run_id, reason in reasons.items():
                conn.execute(runs.update().where(runs.c.id == run_id).values(queue_reason=reason))
            rows = conn.execute(select(runs).where(runs.c.id.in_(claimed))).mappings().all() if claimed else []
        records = {row["id"]: _record(row) for row in rows}
        return [records[run_id] for run_id in claimed]

    def set_run_driver(self, run_id: int, driver: Driver, *, log_uri: str | None = None) -> None:
        """The process the service started to drive queued run ``run_id`` (before it takes the run), and where
        the copy of its output goes (:mod:`airflowless.service.driver_logs`)."""
        runs = schema.pipeline_runs
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(and_(runs.c.id == run_id, runs.c.status == RunStatus.QUEUED)).values(
                driver_host=driver.host, driver_pid=driver.pid, driver_started=driver.started, heartbeat_at=utc_now()))
            if log_uri is not None:  # also when a warm driver took the run already
                conn.execute(runs.update().where(runs.c.id == run_id).values(driver_log_uri=log_uri))

    def take_queued_run(self, run_id: int, *, module: str, params: dict[str, Any], driver: Driver,
                        address: str | None) -> None:
        """The driver takes queued run ``run_id``: it is ``running`` from now; :class:`ResumeError` if it is
        not queued any more (cancelled, or another driver took it)."""
        runs = schema.pipeline_runs
        now = utc_now()
        with self.engine.begin() as conn:
            taken = conn.execute(runs.update().where(and_(runs.c.id == run_id, runs.c.status == RunStatus.QUEUED))
                                 .values(status=RunStatus.RUNNING, started_at=now, module=module, params=params,
                                         address=address,
                                         driver_host=driver.host, driver_pid=driver.pid,
                                         driver_started=driver.started, heartbeat_at=now, queue_reason=None))
            if taken.rowcount != 1:
                status = conn.execute(select(runs.c.status).where(runs.c.id == run_id)).scalar()
                raise ResumeError(f"run {run_id} is {status or 'not in the record'}, not queued: "
                                  "another driver took it, or it was cancelled")

    def cancel_queued_run(self, run_id: int, reason: str = "cancelled while queued") -> bool:
        """End run ``run_id`` ``cancelled`` if it is still queued; whether it was."""
        runs = schema.pipeline_runs
        with self.engine.begin() as conn:
            done = conn.execute(runs.update().where(and_(runs.c.id == run_id, runs.c.status == RunStatus.QUEUED))
                                .values(status=RunStatus.CANCELLED, error=reason, finished_at=utc_now()))
        return done.rowcount == 1

    def fail_queued_run(self, run_id: int, error: str) -> bool:
        """End run ``run_id`` ``failed`` if its driver could not take it (its module fails to load)."""
        runs = schema.pipeline_runs
        with self.engine.begin() as conn:
            done = conn.execute(runs.update().where(and_(runs.c.id == run_id, runs.c.status == RunStatus.QUEUED))
                                .values(status=RunStatus.FAILED, error=error, finished_at=utc_now()))
        return done.rowcount == 1

    def release_orphans(self, *, now: float | None = None) -> list[int]:
        """Queue again the runs claimed by services that died before a driver took them; their ids."""
        runs = schema.pipeline_runs
        now = now or time.time()
        released: list[int] = []
        with self.engine.begin() as conn:
            _lock(conn)
            claimed = conn.execute(select(runs.c.id, runs.c.claimed_by, runs.c.driver_host, runs.c.driver_pid,
                                          runs.c.driver_started, runs.c.heartbeat_at)
                                   .where(and_(runs.c.status == RunStatus.QUEUED, runs.c.claimed_by.is_not(None)))
                                   ).all()
            if not claimed:
                return []
            alive = _live_services(conn, now)
            for row in claimed:
                if row.claimed_by in alive:
                    continue
                driver = Driver(row.driver_host, row.driver_pid, row.driver_started)
                if row.driver_pid is not None and driver_alive(driver, heartbeat_at=row.heartbeat_at, now=now):
                    continue  # its driver is starting: it takes the run itself
                conn.execute(runs.update().where(and_(runs.c.id == row.id, runs.c.status == RunStatus.QUEUED))
                             .values(claimed_by=None, claimed_at=None, driver_host=None, driver_pid=None,
                                     driver_started=None, queue_reason="queued again: its service died"))
                released.append(int(row.id))
        return released

    def adopt_drivers(self, service_id: int, host: str, *, now: float | None = None) -> list[dict[str, Any]]:
        """Claim for service ``service_id`` the running runs whose drivers run on ``host`` but whose service is
        gone (killed, or stopped: its drivers ran on); for each, ``{"id", "driver_pid", "claimed_at" (when
        the first service started its driver for the run), "driver_log_uri"}``. Under the queue's lock: one
        service adopts each."""
        runs = schema.pipeline_runs
        now = now or time.time()
        adopted: list[dict[str, Any]] = []
        with self.engine.begin() as conn:
            _lock(conn)
            rows = conn.execute(select(runs.c.id, runs.c.claimed_by, runs.c.claimed_at, runs.c.driver_pid,
                                       runs.c.driver_started, runs.c.heartbeat_at, runs.c.driver_log_uri)
                                .where(and_(runs.c.status == RunStatus.RUNNING, runs.c.claimed_by.is_not(None),
                                            runs.c.claimed_by != service_id, runs.c.driver_host == host,
                                            runs.c.driver_pid.is_not(None)))).all()
            if not rows:
                return []
            alive = _live_services(conn, now)
            for row in rows:
                driver = Driver(host, row.driver_pid, row.driver_started)
                if row.claimed_by in alive or not driver_alive(driver, heartbeat_at=aware(row.heartbeat_at), now=now):
                    continue  # its service watches it; or it is dead, and the record says so (abandoned)
                conn.execute(runs.update().where(runs.c.id == row.id).values(claimed_by=service_id))
                adopted.append({"id": int(row.id), "driver_pid": int(row.driver_pid),
                                "claimed_at": aware(row.claimed_at), "driver_log_uri": row.driver_log_uri})
        return adopted

    def resume_abandoned_runs(self, *, now: float | None = None) -> list[tuple[int, int | None]]:
        """Settle the running runs of deployments with ``resume_abandoned`` whose driver died, and queue a resume
        of each while its deployment's budget lasts; (run, the run queued to resume it or None) for each.

        In one transaction under the queue's lock: the dead run is settled ``abandoned`` and claimed
        (``resumed_by``) by the queued one, so it is resumed once however many services look. The queued run
        (trigger ``resume``) has the same parameters and data interval, the next ``rerun`` of that interval,
        and ``resumed_from``: its driver reuses what the dead run finished.
        """
        runs, deployments = schema.pipeline_runs, schema.pipeline_deployments
        now = now or time.time()
        found: list[tuple[int, int | None]] = []
        with self.engine.begin() as conn:
            _lock(conn)
            rows = conn.execute(select(runs, deployments.c.resume_abandoned.label("budget"))
                                .join(deployments, deployments.c.id == runs.c.deployment_id)
                                .where(and_(runs.c.status == RunStatus.RUNNING, runs.c.resumed_by.is_(None),
                                            deployments.c.resume_abandoned > 0))).mappings().all()
            for row in rows:
                driver = Driver(row["driver_host"], row["driver_pid"], row["driver_started"])
                if driver_alive(driver, heartbeat_at=aware(row["heartbeat_at"] or row["created_at"]), now=now):
                    continue
                error = "the driver died before the run ended"
                resumes = _resumes_before(conn, row["resumed_from"])
                resumed_by = None
                if resumes < row["budget"]:
                    resumed_by = _queue_resume(conn, row)
                else:
                    error += (f"; not resumed: resumed {resumes} time(s) already, its deployment's "
                              f"resume_abandoned ({row['budget']})")
                conn.execute(runs.update().where(and_(runs.c.id == row["id"], runs.c.status == RunStatus.RUNNING))
                             .values(status=RunStatus.ABANDONED, finished_at=utc_now(), error=error,
                                     resumed_by=resumed_by))
                self._settle_stages(conn, row["id"], StageStatus.ABANDONED, StageStatus.ABANDONED,
                                    "the driver died before the stage ended")
                found.append((int(row["id"]), resumed_by))
        return found

    def queued_runs(self) -> list[RunRecord]:
        """The runs waiting in the queue, in the order they would start."""
        runs = schema.pipeline_runs
        with self.engine.begin() as conn:
            rows = conn.execute(select(runs).where(runs.c.status == RunStatus.QUEUED)
                                .order_by(runs.c.priority.desc(), runs.c.id)).mappings().all()
        return [_record(row) for row in rows]

    # -- backfills -------------------------------------------------------------
    def create_backfill(self, name: str, start: datetime, end: datetime, *, max_active_runs: int | None = None,
                        rerun: bool = False) -> tuple[int, list[int]]:
        """Queue one run per interval of deployment ``name`` ending in ``(start, end]``, oldest first.

        An interval that already has a run that succeeded is left alone unless
        ``rerun``; one whose run is queued or running is always left alone. The
        backfill's id and its runs' ids.
        """
        from ..service.schedules import Schedule

        if end <= start:
            raise ConfigError(f"a backfill runs from an earlier date to a later one; got --from {start.isoformat()} "
                              f"--to {end.isoformat()}")
        deployment = self.get_pipeline_deployment(name)
        if deployment["schedule"] is None:
            raise ConfigError(f"deployment {name!r} has no schedule, so no intervals to backfill; "
                              "trigger it instead (airflowless deployments trigger)")
        schedule = Schedule.from_json(deployment["schedule"])
        ticks = list(schedule.ticks(start, end))
        if not ticks:
            raise ConfigError(f"no tick of {schedule.describe()} falls in ({start.isoformat()}, {end.isoformat()}]")
        runs = schema.pipeline_runs
        queued: list[int] = []
        with self.engine.begin() as conn:
            _lock(conn)
            backfill_id = int(conn.execute(schema.backfills.insert().values(
                deployment_id=deployment["id"], start=start, end=end, max_active_runs=max_active_runs,
                rerun=int(rerun), status="running", created_at=utc_now())).inserted_primary_key[0])  # type: ignore[index]
            for tick in ticks:
                interval = schedule.interval(tick)
                earlier = conn.execute(select(runs.c.status, runs.c.rerun).where(and_(
                    runs.c.deployment_id == deployment["id"], runs.c.interval_start == interval[0]))).all()
                if any(r.status in (RunStatus.QUEUED, RunStatus.RUNNING) for r in earlier):
                    continue
                if not rerun and any(r.status == RunStatus.SUCCEEDED for r in earlier):
                    continue  # done: --rerun runs it again
                attempt = max((r.rerun or 0 for r in earlier), default=-1) + 1
                run_id = _insert_queued(conn, deployment["pipeline"], target=deployment["target"],
                                        params=deployment["params"], trigger=Trigger.BACKFILL,
                                        deployment_id=deployment["id"], priority=deployment["priority"],
                                        pool=deployment["pool"], interval=interval, rerun=attempt,
                                        backfill_id=backfill_id)
                if run_id is not None:
                    queued.append(run_id)
        return backfill_id, queued

    def cancel_backfill(self, backfill_id: int) -> list[int]:
        """Cancel backfill ``backfill_id``: its queued runs end ``cancelled``; those ids (running ones go on)."""
        runs = schema.pipeline_runs
        with self.engine.begin() as conn:
            ids = conn.execute(select(runs.c.id).where(and_(runs.c.backfill_id == backfill_id,
                                                            runs.c.status == RunStatus.QUEUED))).scalars().all()
            conn.execute(schema.backfills.update().where(schema.backfills.c.id == backfill_id).values(status="cancelled"))
        return [run_id for run_id in ids if self.cancel_queued_run(run_id, "its backfill was cancelled")]

    # -- services --------------------------------------------------------------
    def register_service(self, driver: Driver, address: str | None) -> int:
        """Record a service starting (its host, pid, start time); its id."""
        with self.engine.begin() as conn:
            result = conn.execute(schema.services.insert().values(
                host=driver.host, pid=driver.pid, started=driver.started, address=address, heartbeat_at=utc_now()))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def service_heartbeat(self, service_id: int, *, stopped: bool = False) -> None:
        table = schema.services
        values: dict[str, Any] = {"heartbeat_at": utc_now()}
        if stopped:
            values["stopped_at"] = utc_now()
        with self.engine.begin() as conn:
            conn.execute(table.update().where(table.c.id == service_id).values(**values))

    def live_services(self) -> list[dict[str, Any]]:
        table = schema.services
        with self.engine.begin() as conn:
            alive = _live_services(conn, time.time())
            rows = conn.execute(select(table).where(table.c.id.in_(sorted(alive)))).mappings().all()
        return [dict(row) for row in rows]


def _insert_queued(conn: Connection, pipeline: str, *, target: str, params: dict[str, Any], trigger: str,
                   deployment_id: int | None, priority: int, pool: str | None,
                   interval: tuple[datetime, datetime] | None, rerun: int, backfill_id: int | None,
                   upstream: dict[str, int] | None = None, detail: str | None = None) -> int | None:
    """Write a queued run; None if its deployment's interval (and rerun), or its upstream run, has one already."""
    upstream_run = max(upstream.values()) if upstream else None
    values = dict(pipeline=pipeline, module=target, target=target, params=params, status=RunStatus.QUEUED,
                  created_at=utc_now(), trigger=trigger, deployment_id=deployment_id, priority=priority, pool=pool,
                  interval_start=interval[0] if interval else None, interval_end=interval[1] if interval else None,
                  rerun=rerun, backfill_id=backfill_id, queue_reason="waiting for the service",
                  upstream_run=upstream_run, upstream_runs=upstream, trigger_detail=detail)
    runs = schema.pipeline_runs
    if interval is not None and conn.execute(select(runs.c.id).where(and_(
            runs.c.deployment_id == deployment_id, runs.c.interval_start == interval[0],
            runs.c.rerun == rerun))).first() is not None:
        return None
    if upstream_run is not None and conn.execute(select(runs.c.id).where(and_(
            runs.c.deployment_id == deployment_id, runs.c.upstream_run == upstream_run))).first() is not None:
        return None
    nested = conn.begin_nested()
    try:
        result = conn.execute(schema.pipeline_runs.insert().values(**values))
    except IntegrityError:  # the unique index: another service wrote it first
        nested.rollback()
        return None
    nested.commit()
    return int(result.inserted_primary_key[0])  # type: ignore[index]


def _resumes_before(conn: Connection, resumed_from: int | None) -> int:
    """How many resumes by the service led to a run resumed from ``resumed_from`` (its chain's length)."""
    runs = schema.pipeline_runs
    count = 0
    while resumed_from is not None:
        row = conn.execute(select(runs.c.trigger, runs.c.resumed_from).where(runs.c.id == resumed_from)).first()
        if row is None:
            break
        count += 1
        resumed_from = row.resumed_from if row.trigger == Trigger.RESUME else None
    return count


def _queue_resume(conn: Connection, row: Any) -> int | None:
    """Queue a resume of dead run ``row`` (same parameters and interval, the interval's next rerun); its id."""
    runs = schema.pipeline_runs
    start, end = aware(row["interval_start"]), aware(row["interval_end"])
    interval = (start, end) if start is not None and end is not None else None
    rerun = 0
    if interval is not None:
        rerun = 1 + (conn.execute(select(func.max(runs.c.rerun)).where(and_(
            runs.c.deployment_id == row["deployment_id"], runs.c.interval_start == row["interval_start"]))).scalar()
            or 0)
    queued = _insert_queued(conn, row["pipeline"], target=row["target"] or row["module"], params=row["params"],
                            trigger=Trigger.RESUME, deployment_id=row["deployment_id"], priority=row["priority"],
                            pool=row["pool"], interval=interval, rerun=rerun, backfill_id=row["backfill_id"],
                            detail=f"resumes run {row['id']}, whose driver died")
    if queued is not None:
        conn.execute(runs.update().where(runs.c.id == queued).values(resumed_from=row["id"]))
    return queued


def _last_followed(conn: Connection, deployment_id: int) -> dict[str, int]:
    """Upstream deployment -> the newest of its runs deployment ``deployment_id`` followed."""
    runs = schema.pipeline_runs
    found: dict[str, int] = {}
    for (upstream,) in conn.execute(select(runs.c.upstream_runs).where(and_(
            runs.c.deployment_id == deployment_id, runs.c.upstream_runs.is_not(None)))):
        for name, run_id in (upstream or {}).items():
            found[name] = max(found.get(name, 0), int(run_id))
    return found


def _check_after(conn: Connection, name: str, after: dict[str, Any]) -> None:
    """``after`` names deployments that exist, run states, and closes no cycle through ``name``."""
    from .records import RunStatus as States

    table = schema.pipeline_deployments
    names = list(after.get("deployments") or [])
    states = list(after.get("states") or [])
    if not names:
        raise ConfigError("--after names at least one deployment, e.g. --after score-days:succeeded")
    unknown_states = sorted(set(states) - States.TERMINAL)
    if not states or unknown_states:
        raise ConfigError(f"--after's states are run states it ends in, among {sorted(States.TERMINAL)}; "
                          f"got {unknown_states or states}")
    rows = {row.name: (row.after or {}).get("deployments", [])
            for row in conn.execute(select(table.c.name, table.c.after))}
    missing = sorted(set(names) - set(rows))
    if missing:
        raise ConfigError(f"--after names deployments that do not exist: {missing}; there are {sorted(rows) or 'none'}")
    rows[name] = names

    def path_to(start: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for upstream in rows.get(start, []):
            if upstream == name:
                return (*seen, upstream)
            if upstream not in seen:
                found = path_to(upstream, (*seen, upstream))
                if found:
                    return found
        return None

    cycle = path_to(name, (name,))
    if cycle:
        raise ConfigError(f"a trigger cycle: {' runs after '.join(cycle)}; a deployment cannot follow itself")


def _check_conditions(conn: Connection, row: Any, conditions: list[dict[str, Any]], zone: str
                      ) -> tuple[str, str] | None:
    """Whether queued run ``row`` may start under its deployment's run conditions (see :func:`verdict`)."""
    from ..service.conditions import needs_previous, verdict

    previous = None
    if needs_previous(conditions):
        runs = schema.pipeline_runs
        found = conn.execute(select(runs).where(and_(
            runs.c.deployment_id == row["deployment_id"], runs.c.id < row["id"],
            runs.c.status.not_in((RunStatus.SKIPPED, RunStatus.CANCELLED)))).order_by(runs.c.id.desc()).limit(1)
        ).mappings().first()
        if found is not None:
            earlier = _record(found)
            previous = (earlier.id, earlier.status)
    due: datetime = aware(row["interval_end"] or row["created_at"])  # type: ignore[assignment]
    return verdict(conditions, due=due, zone=zone, previous=previous)


def _active_counts(conn: Connection, now: float) -> tuple[dict[int, int], dict[int, int], dict[str, int]]:
    """Runs holding a place now (claimed, or running with a live driver): by deployment (outside
    backfills), by backfill, by pool."""
    runs = schema.pipeline_runs
    rows = conn.execute(select(runs.c.deployment_id, runs.c.backfill_id, runs.c.pool, runs.c.status,
                               runs.c.driver_host, runs.c.driver_pid, runs.c.driver_started, runs.c.heartbeat_at,
                               runs.c.created_at)
                        .where(or_(runs.c.status == RunStatus.RUNNING,
                                   and_(runs.c.status == RunStatus.QUEUED, runs.c.claimed_by.is_not(None))))).all()
    by_deployment: dict[int, int] = {}
    by_backfill: dict[int, int] = {}
    by_pool: dict[str, int] = {}
    for row in rows:
        if row.status == RunStatus.RUNNING and not driver_alive(
                Driver(row.driver_host, row.driver_pid, row.driver_started),
                heartbeat_at=aware(row.heartbeat_at or row.created_at), now=now):
            continue  # abandoned
        if row.backfill_id is not None:
            by_backfill[row.backfill_id] = by_backfill.get(row.backfill_id, 0) + 1
        elif row.deployment_id is not None:
            by_deployment[row.deployment_id] = by_deployment.get(row.deployment_id, 0) + 1
        if row.pool is not None:
            by_pool[row.pool] = by_pool.get(row.pool, 0) + 1
    return by_deployment, by_backfill, by_pool


def _why_wait(row: Any, by_deployment: dict[int, int], by_backfill: dict[int, int], by_pool: dict[str, int],
              limits: dict[int, int | None], backfill_limits: dict[int, int | None],
              slots: dict[str, int]) -> str | None:
    """Why queued run ``row`` cannot start now, or None."""
    if row["backfill_id"] is not None:
        limit = backfill_limits.get(row["backfill_id"])
        if limit is not None and by_backfill.get(row["backfill_id"], 0) >= limit:
            return f"its backfill's max_active_runs ({limit}) are running"
    elif row["deployment_id"] is not None:
        limit = limits.get(row["deployment_id"])
        if limit is not None and by_deployment.get(row["deployment_id"], 0) >= limit:
            return f"its deployment's max_active_runs ({limit}) are running"
    pool = row["pool"]
    if pool is not None and by_pool.get(pool, 0) >= slots.get(pool, 0):
        return f"pool {pool!r} is full ({by_pool.get(pool, 0)} of {slots.get(pool, 0)} slots taken)"
    return None


def _live_services(conn: Connection, now: float) -> set[int]:
    table = schema.services
    rows = conn.execute(select(table).where(table.c.stopped_at.is_(None))).mappings().all()
    return {row["id"] for row in rows
            if driver_alive(Driver(row["host"], row["pid"], row["started"]), heartbeat_at=aware(row["heartbeat_at"]),
                            now=now)}


def _deployment(row: Any) -> dict[str, Any]:
    data = dict(row)
    for key in ("next_due_at", "created_at", "updated_at"):
        data[key] = aware(data[key])
    data["paused"], data["catchup"] = bool(data["paused"]), bool(data["catchup"])
    return data


def _record(row: Any) -> RunRecord:
    return run_from_row(row, [])


