"""The service's record: due intervals queued once, claims under limits, pools and priorities, orphans, backfills.

On both backends (SQLite file and the real PostgreSQL), with a clock the tests move.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from airflowless.errors import ConfigError, ResumeError
from airflowless.service.schedules import Schedule
from airflowless.store import RunStatus, Store, open_store, schema
from airflowless.store.liveness import Driver, this_driver
from airflowless.store.migrations import MIGRATIONS

UTC = timezone.utc
T0 = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
A_DEAD_PID = 2 ** 22 + 17  # above the kernel's default pid_max: no process has it


@pytest.fixture
def db(backend_url: str) -> Iterator[Store]:
    store = open_store(backend_url)
    yield store
    store.close()


def _deploy(db: Store, name: str = "hourly", *, catchup: bool = False, **options: Any) -> int:
    return db.create_pipeline_deployment(name, pipeline="p", target="/x/p.py:p", params={"n": 1},
                                         schedule=Schedule.parse(every=3600), catchup=catchup, now=T0, **options)


def _start(db: Store, runs: list[Any]) -> None:
    """The drivers take the claimed runs (this process drives them, so they count as live)."""
    for run in runs:
        db.take_queued_run(run.id, module="m", params=run.params, driver=this_driver(), address=None)


def test_due_intervals_are_queued_once_each_and_the_next_due_time_moves_on(db: Store) -> None:
    _deploy(db)
    assert db.schedule_due(T0 + timedelta(minutes=59)) == []  # not due yet
    first = db.schedule_due(T0 + timedelta(hours=1, seconds=1))
    assert len(first) == 1 and db.schedule_due(T0 + timedelta(hours=1, seconds=2)) == []  # not twice
    run = db.get_run(first[0])
    assert run.status == RunStatus.QUEUED and run.trigger == "schedule"
    assert (run.interval_start, run.interval_end) == (T0, T0 + timedelta(hours=1))
    assert db.get_pipeline_deployment("hourly")["next_due_at"] == T0 + timedelta(hours=2)


def test_without_catchup_downtime_gives_one_run_for_the_latest_interval_and_with_it_one_per_interval(
        db: Store) -> None:
    _deploy(db, "latest-only")
    _deploy(db, "every-one", catchup=True)
    queued = [db.get_run(i) for i in db.schedule_due(T0 + timedelta(hours=5, minutes=30))]
    latest = [r.interval_end for r in queued if r.deployment_id == db.get_pipeline_deployment("latest-only")["id"]]
    every = [r.interval_end for r in queued if r.deployment_id == db.get_pipeline_deployment("every-one")["id"]]
    assert latest == [T0 + timedelta(hours=5)]
    assert every == [T0 + timedelta(hours=h) for h in range(1, 6)]


def test_an_interval_queued_again_is_refused_by_the_record(db: Store) -> None:
    deployment = _deploy(db)
    interval = (T0, T0 + timedelta(hours=1))
    db.enqueue_run("p", target="t", params={}, trigger="schedule", deployment_id=deployment, interval=interval)
    with pytest.raises(ConfigError, match="queued already"):
        db.enqueue_run("p", target="t", params={}, trigger="schedule", deployment_id=deployment, interval=interval)
    with db.engine.begin() as conn, pytest.raises(IntegrityError):  # the index itself refuses it
        conn.execute(schema.pipeline_runs.insert().values(pipeline="p", module="m", params={}, status="queued",
                                                          created_at=T0, deployment_id=deployment, interval_start=T0,
                                                          rerun=0))


def test_claims_keep_max_active_runs_pools_and_priorities(db: Store) -> None:
    service = db.register_service(this_driver(), None)
    one_at_a_time = _deploy(db, "one-at-a-time", max_active_runs=1, catchup=True)
    db.set_pool("gpu", 1)
    a, b = (db.enqueue_run("p", target="t", params={}, trigger="submit", pool="gpu") for _ in range(2))
    urgent = db.enqueue_run("p", target="t", params={}, trigger="submit", priority=5)
    scheduled = db.schedule_due(T0 + timedelta(hours=3))  # three intervals of one-at-a-time
    claimed = db.claim_runs(service)
    assert [r.id for r in claimed] == [urgent, a, scheduled[0]]  # priority first, then age; one per limit
    waiting = {r.id: r.queue_reason for r in db.queued_runs() if r.claimed_by is None}
    assert "pool 'gpu' is full (1 of 1 slots taken)" in waiting[b]
    assert "max_active_runs (1)" in waiting[scheduled[1]]
    assert db.claim_runs(service) == []  # claimed runs hold their places before their drivers take them
    _start(db, claimed)
    assert db.claim_runs(service) == []  # and running ones
    db.finish_run(a, "succeeded")
    db.finish_run(scheduled[0], "failed")
    assert [r.id for r in db.claim_runs(service)] == [b, scheduled[1]]
    assert db.list_pools() == {"gpu": {"slots": 1, "used": 1}}
    assert one_at_a_time


def test_runs_held_by_a_full_pool_do_not_block_the_runs_behind_them(db: Store) -> None:
    service = db.register_service(this_driver(), None)
    db.set_pool("closed", 0)
    held = [db.enqueue_run("p", target="t", params={}, trigger="submit", pool="closed") for _ in range(5)]
    free = db.enqueue_run("p", target="t", params={}, trigger="submit")
    assert [r.id for r in db.claim_runs(service, limit=1)] == [free]
    assert {r.id for r in db.queued_runs() if r.claimed_by is None} == set(held)


def test_a_run_whose_driver_died_frees_its_place(db: Store) -> None:
    service = db.register_service(this_driver(), None)
    _deploy(db, "one", max_active_runs=1, catchup=True)
    first, second = db.schedule_due(T0 + timedelta(hours=2))
    (claimed,) = db.claim_runs(service)
    db.take_queued_run(claimed.id, module="m", params={}, driver=Driver(socket.gethostname(), A_DEAD_PID, None),
                       address=None)
    assert db.get_run(first).status == RunStatus.ABANDONED
    assert [r.id for r in db.claim_runs(service)] == [second]


def test_a_queued_run_is_taken_by_one_driver_only_and_a_cancelled_one_by_none(db: Store) -> None:
    run_id = db.enqueue_run("p", target="t", params={}, trigger="submit")
    db.take_queued_run(run_id, module="m", params={"n": 2}, driver=this_driver(), address=None)
    with pytest.raises(ResumeError, match="is running, not queued"):
        db.take_queued_run(run_id, module="m", params={}, driver=this_driver(), address=None)
    assert db.get_run(run_id).params == {"n": 2}
    other = db.enqueue_run("p", target="t", params={}, trigger="submit")
    assert db.cancel_queued_run(other) and not db.cancel_queued_run(other)
    with pytest.raises(ResumeError, match="is cancelled, not queued"):
        db.take_queued_run(other, module="m", params={}, driver=this_driver(), address=None)


def test_claims_of_a_dead_service_go_back_to_the_queue_unless_their_driver_lives(db: Store) -> None:
    dead = db.register_service(Driver(socket.gethostname(), A_DEAD_PID, None), None)
    alive = db.register_service(this_driver(), None)
    orphan, starting = (db.enqueue_run("p", target="t", params={}, trigger="submit") for _ in range(2))
    assert {r.id for r in db.claim_runs(dead)} == {orphan, starting}
    db.set_run_driver(starting, this_driver())  # its driver is still starting up: it takes the run itself
    assert db.release_orphans() == [orphan]
    assert [r.id for r in db.claim_runs(alive)] == [orphan]
    assert db.release_orphans() == []
    assert [s["id"] for s in db.live_services()] == [alive]


def test_a_backfill_queues_each_interval_oldest_first_under_its_own_limit_and_reruns_only_when_asked(
        db: Store) -> None:
    _deploy(db, "daily-ish", max_active_runs=1)
    service = db.register_service(this_driver(), None)
    backfill, runs = db.create_backfill("daily-ish", T0, T0 + timedelta(hours=6), max_active_runs=2)
    assert len(runs) == 6
    records = [db.get_run(r) for r in runs]
    assert [r.interval_end for r in records] == [T0 + timedelta(hours=h) for h in range(1, 7)]
    assert {r.trigger for r in records} == {"backfill"} and {r.backfill_id for r in records} == {backfill}
    claimed = db.claim_runs(service)
    assert [r.id for r in claimed] == runs[:2]
    _start(db, claimed)
    for run_id in runs[:2]:
        db.finish_run(run_id, "succeeded")
    db.finish_run(runs[2], "failed")
    assert db.cancel_backfill(backfill) == runs[3:]
    # again over the same range: the failed and cancelled intervals run, the succeeded ones are left alone
    _, again = db.create_backfill("daily-ish", T0, T0 + timedelta(hours=6))
    assert [db.get_run(r).interval_end for r in again] == [T0 + timedelta(hours=h) for h in range(3, 7)]
    assert [db.get_run(r).rerun for r in again] == [1, 1, 1, 1]
    for run_id in again:
        db.cancel_queued_run(run_id)
    _, rerun = db.create_backfill("daily-ish", T0, T0 + timedelta(hours=2), rerun=True)
    assert [db.get_run(r).rerun for r in rerun] == [1, 1]


@pytest.mark.parametrize(("start", "end", "says"), [
    (T0 + timedelta(days=1), T0, "from an earlier date to a later one"),
    (T0, T0 + timedelta(minutes=30), "no tick of every 3600 s"),
])
def test_a_bad_backfill_range_is_refused_before_anything_is_queued(db: Store, start: datetime, end: datetime,
                                                                   says: str) -> None:
    _deploy(db)
    with pytest.raises(ConfigError, match=says):
        db.create_backfill("hourly", start, end)
    assert db.queued_runs() == []


def test_deployment_names_pools_and_unknown_names_are_clear_errors(db: Store) -> None:
    _deploy(db)
    with pytest.raises(ConfigError, match="a deployment named 'hourly' exists"):
        _deploy(db)
    with pytest.raises(ConfigError, match="no pool named 'tpu'"):
        _deploy(db, "other", pool="tpu")
    with pytest.raises(KeyError, match="no deployment named 'nightly'; there are \\['hourly'\\]"):
        db.get_pipeline_deployment("nightly")
    with pytest.raises(ConfigError, match="from 0 up"):
        db.set_pool("gpu", -1)


def test_paused_and_broken_deployments_are_not_scheduled_and_unpausing_skips_the_slept_ticks(db: Store) -> None:
    deployment = _deploy(db)
    db.set_deployment_paused("hourly", True)
    assert db.schedule_due(T0 + timedelta(hours=3)) == []
    db.set_deployment_paused("hourly", False, now=T0 + timedelta(hours=3, minutes=10))
    assert db.get_pipeline_deployment("hourly")["next_due_at"] == T0 + timedelta(hours=4)
    db.mark_deployment_broken(deployment, "ImportError: no module named x")
    assert db.schedule_due(T0 + timedelta(hours=5)) == []
    assert db.list_pipeline_deployments()[0]["broken"] == "ImportError: no module named x"


def test_migrations_7_to_10_keep_older_records_readable(backend_url: str) -> None:
    store = open_store(backend_url)
    with store.engine.begin() as conn:  # a database as version 6 left it, with an old run
        conn.execute(text("DROP INDEX uq_runs_deployment_interval"))
        conn.execute(text("DROP INDEX uq_runs_deployment_upstream"))
        for index in ("ix_pipeline_runs_deployment_id", "ix_pipeline_runs_backfill_id"):
            conn.execute(text(f"DROP INDEX {index}"))
        for column in ("target", "deployment_id", "trigger", "priority", "pool", "interval_start", "interval_end",
                       "rerun", "queue_reason", "claimed_by", "claimed_at", "backfill_id", "upstream_run",
                       "upstream_runs", "trigger_detail", "started_at", "driver_log_uri"):
            conn.execute(text(f'ALTER TABLE pipeline_runs DROP COLUMN "{column}"'))
        for table in ("pipeline_deployments", "pools", "backfills", "services", "notifications", "trigger_seen",
                      "deployment_alerts"):
            conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text("DELETE FROM airflowless_schema_version WHERE version >= 7"))
        conn.execute(text("INSERT INTO pipeline_runs (pipeline, module, params, status, created_at, finished_at) "
                          "VALUES ('old', 'm', '{}', 'succeeded', :at, :at)"), {"at": T0})
    store.close()
    again = open_store(backend_url)
    try:
        assert again.version == MIGRATIONS[-1].version == 15
        (old,) = again.list_runs()
        assert old.status == RunStatus.SUCCEEDED and old.trigger is None
        _deploy(again)
        assert len(again.schedule_due(T0 + timedelta(hours=1))) == 1
    finally:
        again.close()
    assert os.getpid()


def test_a_queued_run_counts_its_run_from_when_its_driver_took_it_not_from_when_it_was_queued(db: Store) -> None:
    from click.testing import CliRunner

    from airflowless.cli.main import cli

    run_id = db.enqueue_run("p", target="t", params={}, trigger="submit")
    with db.engine.begin() as conn:  # queued an hour ago
        conn.execute(schema.pipeline_runs.update().where(schema.pipeline_runs.c.id == run_id).values(
            created_at=datetime.now(timezone.utc) - timedelta(hours=1)))
    listing = CliRunner().invoke(cli, ["runs", "list", "--db", str(db.url)])
    assert listing.exit_code == 0 and "queued " in listing.output  # not a start time
    db.take_queued_run(run_id, module="m", params={}, driver=this_driver(), address=None)
    db.finish_run(run_id, RunStatus.SUCCEEDED)
    run = db.get_run(run_id)
    assert run.started_at is not None and run.started_at - run.created_at >= timedelta(minutes=59)
    assert run.duration_s is not None and run.duration_s < 60  # it ran seconds, it waited an hour
