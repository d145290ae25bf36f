"""The record of a run's life on both backends: drivers, abandoned runs, one resume at a time, no NaN."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from airflowless.errors import NonFiniteValueError, ResumeError
from airflowless.settings import get_settings
from airflowless.store import RunStatus, StageStatus, Store, open_store
from airflowless.store import schema as tables
from airflowless.store.liveness import Driver
from airflowless.store.migrations import MIGRATIONS


def _stages(store: Store, run_id: int) -> None:
    store.add_stages(run_id, [
        {"node": "a", "stage": "a", "upstream": [], "cache_key": "ka", "status": StageStatus.SUCCEEDED},
        {"node": "b", "stage": "b", "upstream": ["a"], "cache_key": "kb", "status": StageStatus.RUNNING},
        {"node": "c", "stage": "c", "upstream": ["b"], "cache_key": "kc", "status": StageStatus.PENDING},
    ])


def _dead_process() -> Driver:
    """A driver that really existed on this host and has exited (its pid is not reused yet)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return Driver(socket.gethostname(), proc.pid, time.time() - 1)


def test_a_run_whose_driver_exited_reads_abandoned_with_its_unsettled_stages(db: Store) -> None:
    run_id = db.create_run("demo", module="m", params={}, driver=_dead_process())
    _stages(db, run_id)
    record = db.get_run(run_id)
    assert record.status == RunStatus.ABANDONED and "driver died" in (record.error or "")
    assert [s.status for s in record.stages] == ["succeeded", "abandoned", "abandoned"]
    assert db.list_runs()[0].status == RunStatus.ABANDONED


def test_a_reused_pid_does_not_keep_a_run_alive(db: Store) -> None:
    mine = Driver(socket.gethostname(), os.getpid(), time.time() - 10_000)  # this pid, another start time
    assert db.get_run(db.create_run("demo", module="m", params={}, driver=mine)).status == RunStatus.ABANDONED
    assert db.get_run(db.create_run("demo", module="m", params={})).status == RunStatus.RUNNING


def test_a_driver_on_another_host_lives_by_its_heartbeat(db: Store) -> None:
    run_id = db.create_run("demo", module="m", params={}, driver=Driver("elsewhere.example", 1, 1.0))
    assert db.get_run(run_id).status == RunStatus.RUNNING
    stale = datetime.now(timezone.utc) - timedelta(seconds=get_settings().heartbeat_timeout_s + 5)
    db.update_run(run_id, heartbeat_at=stale)
    assert db.get_run(run_id).status == RunStatus.ABANDONED
    db.heartbeat(run_id)
    assert db.get_run(run_id).status == RunStatus.RUNNING


def test_finishing_a_run_settles_every_stage(db: Store) -> None:
    cancelled = db.create_run("demo", module="m", params={})
    _stages(db, cancelled)
    db.finish_run(cancelled, RunStatus.CANCELLED, error="cancelled by SIGTERM")
    assert [s.status for s in db.get_run(cancelled).stages] == ["succeeded", "cancelled", "cancelled"]
    failed = db.create_run("demo", module="m", params={})
    _stages(db, failed)
    db.finish_run(failed, RunStatus.FAILED, error="the cluster went away")
    stages = db.get_run(failed).stages
    assert [s.status for s in stages] == ["succeeded", "failed", "skipped"]
    assert stages[1].error == "the cluster went away" and stages[1].finished_at is not None


def test_resume_refuses_a_live_run_and_settles_an_abandoned_one(db: Store) -> None:
    live = db.create_run("demo", module="m", params={})
    with pytest.raises(ResumeError, match=f"run {live} is still running"):
        db.create_run("demo", module="m", params={}, resumed_from=live)
    dead = db.create_run("demo", module="m", params={}, driver=_dead_process())
    _stages(db, dead)
    resumed = db.create_run("demo", module="m", params={}, resumed_from=dead)
    assert db.resume_blocker(dead) == (f"run {dead} is being resumed by run {resumed} (driver pid {os.getpid()} "
                                       f"on {socket.gethostname()}); wait for that run, or resume it instead")
    with db.engine.connect() as conn:  # written, not only read so
        row = conn.execute(tables.pipeline_runs.select().where(tables.pipeline_runs.c.id == dead)).mappings().one()
        stages = dict(conn.execute(text(f"SELECT node, status FROM stage_runs WHERE run_id = {dead}")).all())
    assert (row["status"], row["resumed_by"]) == ("abandoned", resumed) and row["finished_at"] is not None
    assert stages == {"a": "succeeded", "b": "abandoned", "c": "abandoned"}
    db.finish_run(resumed, RunStatus.FAILED)
    assert db.resume_blocker(dead) is None  # the resume ended: it may be resumed again


RACER = """
import sys, time
from pathlib import Path
from airflowless.store import open_store
store = open_store(sys.argv[1])
print("ready", flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.005)
try:
    run_id = store.create_run("demo", module="m", params={}, resumed_from=int(sys.argv[3]))
    print("won", run_id, flush=True)
except Exception as exc:
    print("lost", type(exc).__name__, exc, flush=True)
sys.stdin.read()  # stay alive (a live driver) until the test has seen every answer
"""


def test_concurrent_resumes_of_one_run_claim_it_once(db: Store, backend_url: str, tmp_path: Path) -> None:
    dead = db.create_run("demo", module="m", params={}, driver=_dead_process())
    start = tmp_path / "start"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, backend_url, str(start), str(dead)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        assert [p.stdout.readline().strip() for p in racers if p.stdout is not None] == ["ready"] * 4
        start.touch()  # released together
        answers = [p.stdout.readline().split() for p in racers if p.stdout is not None]
    finally:
        for p in racers:
            p.communicate("", timeout=60)
    won = [a for a in answers if a[0] == "won"]
    assert len(won) == 1, answers
    assert all(a[:2] == ["lost", "ResumeError"] for a in answers if a[0] != "won"), answers
    assert db.get_run(dead).resumed_by == int(won[0][1])
    assert db.count_runs() == 2, "the losers' runs were rolled back"


def test_non_finite_numbers_never_reach_the_record(db: Store) -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(NonFiniteValueError, match="parameter 'lr' is"):
            db.create_run("demo", module="m", params={"lr": bad})
    with pytest.raises(NonFiniteValueError, match=r"parameter \"grid\['eta'\]\[1\]\" is nan"):
        db.create_run("demo", module="m", params={"grid": {"eta": [0.1, math.nan]}})
    assert db.count_runs() == 0
    experiment = db.create_experiment("e", kind="tune", config={"eta": math.inf})
    trial = db.add_trial(experiment, "t0", config={"eta": math.nan})
    db.add_metrics(trial, 1, {"loss": math.nan, "acc": math.inf, "ok": 0.5})
    db.update_trial(trial, last_metrics={"loss": -math.inf})
    db.record_batch([(trial, 2, {"loss": math.inf})], {trial: {"last_metrics": {"loss": math.nan}}})
    assert db.find_experiment(experiment)["config"] == {"eta": None}
    assert db.list_trials(experiment)[0]["config"] == {"eta": None}
    assert db.list_trials(experiment)[0]["last_metrics"] == {"loss": None}
    assert db.trial_metrics(trial) == [{"step": 1, "loss": None, "acc": None, "ok": 0.5},
                                       {"step": 2, "loss": None}]
    with db.engine.connect() as conn:  # standard JSON text, which every reader accepts
        raw = conn.execute(text("SELECT CAST(\"values\" AS TEXT) FROM metrics ORDER BY step")).scalars().all()
    assert all("NaN" not in r and "Infinity" not in r for r in raw), raw


def test_migration_4_keeps_old_rows_readable(backend_url: str) -> None:
    store = open_store(backend_url)
    with store.engine.begin() as conn:  # a database as version 3 left it, with two old runs
        for column in ("driver_host", "driver_pid", "driver_started", "heartbeat_at", "resumed_by"):
            conn.execute(text(f'ALTER TABLE pipeline_runs DROP COLUMN "{column}"'))
        conn.execute(text("DELETE FROM airflowless_schema_version WHERE version >= 4"))
        long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
        for status in ("interrupted", "running"):
            conn.execute(text("INSERT INTO pipeline_runs (pipeline, module, params, status, created_at) "
                              "VALUES ('old', 'm', '{}', :status, :at)"), {"status": status, "at": long_ago})
    store.close()
    again = open_store(backend_url)
    try:
        assert again.version == MIGRATIONS[-1].version
        assert [r.status for r in again.list_runs()] == [RunStatus.ABANDONED, RunStatus.CANCELLED]
        assert again.get_run(again.create_run("new", module="m", params={})).status == RunStatus.RUNNING
    finally:
        again.close()
