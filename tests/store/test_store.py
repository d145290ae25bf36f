"""Tests for airflowless.store on both backends: an SQLite file and the real PostgreSQL."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import inspect, select
from sqlalchemy.engine import make_url

from airflowless.errors import AirflowlessError, StoreError
from airflowless.store import RunStatus, StageStatus, Store, open_store
from airflowless.store import schema as tables
from airflowless.store.migrations import MIGRATIONS


def _stage(node: str, *, cache_key: str = "k", upstream: list[str] | None = None, **fields: object) -> dict:
    return {"node": node, "stage": node.split("-")[0], "upstream": upstream or [],
            "cache_key": cache_key, "status": StageStatus.PENDING, **fields}


def _version_rows(store: Store) -> list[int]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(tables.schema_version.c.version)).scalars())


def _assert_utc(value: datetime | None, *, near: datetime) -> None:
    assert value is not None
    assert value.tzinfo is not None, f"{value!r} is naive"
    assert value.utcoffset() == timedelta(0), f"{value!r} is not in UTC"
    assert abs(value - near) < timedelta(minutes=1)


# -- schema and migrations ----------------------------------------------------------------

def test_migrate_creates_every_schema_version(db: Store) -> None:
    assert db.version == MIGRATIONS[-1].version == 15
    assert _version_rows(db) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    with db.engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
    assert {"airflowless_schema_version", "pipeline_runs", "stage_runs", "experiments", "trials", "metrics",
            "checkpoints", "deployments", "pipeline_deployments", "pools", "backfills", "services"} <= names


def test_a_record_written_at_version_13_gains_the_deployments_resume_budget_and_driver_log_copies(
        backend_url: str) -> None:
    from sqlalchemy import text

    from airflowless.store.liveness import this_driver

    first = open_store(backend_url)
    first.create_pipeline_deployment("old", pipeline="p", target="p.py", params={}, schedule=None)
    old_run = first.create_run("demo", module="demo.py", params={})
    with first.engine.begin() as conn:  # as version 13 wrote it
        conn.execute(text("ALTER TABLE pipeline_deployments DROP COLUMN resume_abandoned"))
        conn.execute(text("ALTER TABLE pipeline_runs DROP COLUMN driver_log_uri"))
        conn.execute(text("DELETE FROM airflowless_schema_version WHERE version IN (14, 15)"))
    first.close()
    again = open_store(backend_url)
    try:
        assert again.version == 15
        assert again.get_pipeline_deployment("old")["resume_abandoned"] is None  # read as 0: never resumed
        again.create_pipeline_deployment("new", pipeline="p", target="p.py", params={}, schedule=None,
                                         resume_abandoned=2)
        assert again.get_pipeline_deployment("new")["resume_abandoned"] == 2
        assert again.get_run(old_run).driver_log_uri is None
        queued = again.enqueue_run("p", target="p.py", params={}, trigger="manual")
        again.set_run_driver(queued, this_driver(), log_uri="s3://b/runs/2/logs/driver.log")
        assert again.get_run(queued).driver_log_uri == "s3://b/runs/2/logs/driver.log"
    finally:
        again.close()


def test_reopening_a_store_is_a_no_op(backend_url: str) -> None:
    first = open_store(backend_url)
    run_id = first.create_run("demo", module="demo.py", params={"n": 1})
    first.close()

    for _ in range(2):
        again = open_store(backend_url)
        try:
            assert again.version == 15
            assert _version_rows(again) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]  # no second row for the same migration
            assert again.get_run(run_id).pipeline == "demo"  # and the data is still there
            assert again.count_runs() == 1
        finally:
            again.close()


# -- pipeline runs --------------------------------------------------------------------------

def test_create_and_get_run(db: Store) -> None:
    run_id = db.create_run("taxi", module="pipelines/taxi.py", params={"n": 3, "path": "data", "xs": [1, 2]},
                           address="tcp://127.0.0.1:8786")

    run = db.get_run(run_id)
    assert run.id == run_id
    assert (run.pipeline, run.module) == ("taxi", "pipelines/taxi.py")
    assert run.params == {"n": 3, "path": "data", "xs": [1, 2]}
    assert run.status == RunStatus.RUNNING
    assert run.address == "tcp://127.0.0.1:8786"
    assert run.finished_at is None and run.duration_s is None and run.error is None
    assert run.resumed_from is None and run.stages == []
    db.finish_run(run_id, RunStatus.FAILED)  # a running run cannot be resumed
    resumed = db.create_run("taxi", module="pipelines/taxi.py", params={}, resumed_from=run_id)
    assert db.get_run(resumed).resumed_from == run_id
    assert db.get_run(run_id).resumed_by == resumed
    assert resumed > run_id
    assert db.count_runs() == 2


def test_get_run_of_a_missing_id_raises_key_error_naming_it(db: Store) -> None:
    db.create_run("demo", module="demo.py", params={})
    with pytest.raises(KeyError, match="no run with id 98765"):
        db.get_run(98765)


def test_list_runs_newest_first_with_limit_and_pipeline_filter(db: Store) -> None:
    ids = [db.create_run("a" if i % 2 == 0 else "b", module="m.py", params={"i": i}) for i in range(6)]

    assert [r.id for r in db.list_runs()] == ids[::-1]
    assert [r.id for r in db.list_runs(limit=2)] == ids[:-3:-1]
    assert [r.id for r in db.list_runs(pipeline="a")] == [ids[4], ids[2], ids[0]]
    assert [r.id for r in db.list_runs(pipeline="b", limit=2)] == [ids[5], ids[3]]
    assert db.list_runs(pipeline="nope") == []
    assert all(r.stages == [] for r in db.list_runs())  # listed without their stages
    assert db.list_runs(limit=1)[0].params == {"i": 5}


def test_finish_run_records_status_time_and_error(db: Store) -> None:
    run_id = db.create_run("demo", module="demo.py", params={})
    time.sleep(0.01)
    db.finish_run(run_id, RunStatus.FAILED, error="stage fit failed")

    run = db.get_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error == "stage fit failed"
    assert run.finished_at is not None and run.finished_at >= run.created_at
    assert run.duration_s is not None and run.duration_s > 0


@pytest.mark.parametrize("status", [RunStatus.RUNNING, "done", ""])
def test_finish_run_rejects_a_non_terminal_status(db: Store, status: str) -> None:
    run_id = db.create_run("demo", module="demo.py", params={})
    with pytest.raises(ValueError, match="succeeded") as info:
        db.finish_run(run_id, status)
    assert repr(status) in str(info.value)
    run = db.get_run(run_id)
    assert run.status == RunStatus.RUNNING and run.finished_at is None


def test_unknown_fields_raise_type_error_and_write_nothing(db: Store) -> None:
    run_id = db.create_run("demo", module="demo.py", params={})
    db.add_stages(run_id, [_stage("load")])

    with pytest.raises(TypeError, match=r"update_run got unknown fields \['colour'\]"):
        db.update_run(run_id, status=RunStatus.SUCCEEDED, colour="red")
    with pytest.raises(TypeError, match=r"update_stage got unknown fields \['run', 'size'\]"):
        db.update_stage(run_id, "load", status=StageStatus.RUNNING, size=1, run=2)
    with pytest.raises(TypeError, match=r"add_stages got unknown fields \['size'\]"):
        db.add_stages(run_id, [_stage("fit"), _stage("deploy", size=3)])

    run = db.get_run(run_id)
    assert run.status == RunStatus.RUNNING
    assert [(s.node, s.status) for s in run.stages] == [("load", StageStatus.PENDING)]


# -- stage runs -----------------------------------------------------------------------------

def test_add_and_update_stages(db: Store) -> None:
    run_id = db.create_run("demo", module="demo.py", params={})
    other = db.create_run("demo", module="demo.py", params={})
    db.add_stages(run_id, [_stage("load", cache_key="k1"),
                           _stage("fit", cache_key="k2", upstream=["load"]),
                           _stage("fit-2", cache_key="k3", upstream=["load", "fit"])])
    db.add_stages(other, [_stage("load", cache_key="k1")])
    db.add_stages(run_id, [])  # nothing to add is fine

    started = datetime.now(timezone.utc)
    db.update_stage(run_id, "load", status=StageStatus.RUNNING, attempts=1, worker="tcp://w1",
                    started_at=started, task_key="load-abc")
    db.update_stage(run_id, "load", status=StageStatus.SUCCEEDED, finished_at=started + timedelta(seconds=2),
                    duration_s=2.0, output_uri="file:///out/load.pkl", output_summary="int: 3")

    run = db.get_run(run_id)
    assert [s.node for s in run.stages] == ["load", "fit", "fit-2"]  # in the order added
    load = run.stage("load")
    assert (load.run_id, load.stage, load.status, load.attempts) == (run_id, "load", StageStatus.SUCCEEDED, 1)
    assert (load.worker, load.task_key, load.cache_key) == ("tcp://w1", "load-abc", "k1")
    assert load.duration_s == 2.0
    assert (load.output_uri, load.output_summary) == ("file:///out/load.pkl", "int: 3")
    assert abs(load.started_at - started) < timedelta(milliseconds=1)
    assert run.stage("fit-2").upstream == ["load", "fit"]
    assert run.stage("fit-2").stage == "fit"
    fit = run.stage("fit")
    assert (fit.status, fit.attempts, fit.worker, fit.output_uri) == (StageStatus.PENDING, 0, None, None)
    # the same node of another run is untouched
    assert db.get_run(other).stage("load").status == StageStatus.PENDING


def test_add_stages_with_different_optional_fields_per_row(db: Store) -> None:
    run_id = db.create_run("demo", module="demo.py", params={})
    db.add_stages(run_id, [
        _stage("load"),
        _stage("fit", status=StageStatus.CACHED, output_uri="file:///o.pkl", reused_from_run=7),
        _stage("deploy", task_key="deploy-1"),
    ])
    run = db.get_run(run_id)
    assert run.stage("load").output_uri is None
    assert (run.stage("fit").status, run.stage("fit").output_uri) == (StageStatus.CACHED, "file:///o.pkl")
    assert run.stage("fit").reused_from_run == 7
    assert run.stage("deploy").task_key == "deploy-1"


def test_find_output_only_done_stages_with_an_output(db: Store) -> None:
    first = db.create_run("demo", module="demo.py", params={})
    db.add_stages(first, [
        _stage("pending"),
        _stage("running", status=StageStatus.RUNNING, output_uri="file:///running.pkl"),
        _stage("failed", status=StageStatus.FAILED, output_uri="file:///failed.pkl"),
        _stage("skipped", status=StageStatus.SKIPPED, output_uri="file:///skipped.pkl"),
        _stage("no-output", status=StageStatus.SUCCEEDED),
    ])
    assert db.find_output("k") is None
    assert db.find_output("unknown") is None

    db.update_stage(first, "pending", status=StageStatus.SUCCEEDED, output_uri="file:///first.pkl")
    found = db.find_output("k")
    assert found is not None
    assert (found.run_id, found.node, found.output_uri) == (first, "pending", "file:///first.pkl")

    # a later cached stage run wins over the earlier one
    second = db.create_run("demo", module="demo.py", params={})
    db.add_stages(second, [_stage("load", status=StageStatus.CACHED, output_uri="file:///second.pkl",
                                  reused_from_run=first)])
    found = db.find_output("k")
    assert found is not None and (found.run_id, found.output_uri) == (second, "file:///second.pkl")

    # restricted to one run
    found = db.find_output("k", run_id=first)
    assert found is not None and found.output_uri == "file:///first.pkl"
    third = db.create_run("demo", module="demo.py", params={})
    assert db.find_output("k", run_id=third) is None

    # a newer stage run that did not finish does not hide the older output
    db.add_stages(third, [_stage("load", status=StageStatus.FAILED, output_uri="file:///third.pkl")])
    found = db.find_output("k")
    assert found is not None and found.run_id == second


# -- deployments ----------------------------------------------------------------------------

def test_deployments_are_recorded_and_move_to_ended_states(db: Store) -> None:
    before = datetime.now(timezone.utc)
    config = {"num_replicas": 2, "autoscaling_config": None, "user_config": {"k": (1, 2)}}
    first = db.record_deployment("taxi", "Model", route_prefix="/predict", num_replicas=2,
                                 http_address="http://127.0.0.1:8000", config=config, pid=11, hostname="h")
    db.record_deployment("taxi", "Ingress", route_prefix="/predict", num_replicas=1,
                         http_address="http://127.0.0.1:8000", config={}, pid=11, hostname="h")
    db.record_deployment("taxi", "Model", route_prefix="/", num_replicas=1, http_address=None, config={},
                         pid=22, hostname="h")  # the same app name served by another process
    rows = db.list_deployments()
    assert [(r["deployment"], r["pid"]) for r in rows] == [("Model", 22), ("Ingress", 11), ("Model", 11)]
    model = rows[-1]
    assert model["id"] == first and model["status"] == "running" and model["num_replicas"] == 2
    assert model["config"] == {"num_replicas": 2, "autoscaling_config": None, "user_config": {"k": [1, 2]}}
    assert (model["route_prefix"], model["http_address"], model["hostname"]) == \
        ("/predict", "http://127.0.0.1:8000", "h")
    _assert_utc(model["created_at"], near=before)
    _assert_utc(model["updated_at"], near=before)

    assert db.update_deployment_status("taxi", "stopped", pid=11, hostname="h") == 2
    assert db.update_deployment_status("taxi", "deleted", pid=11) == 0  # ended rows keep their state
    assert [r["pid"] for r in db.list_deployments(status="running")] == [22]
    assert {r["status"] for r in db.list_deployments() if r["pid"] == 11} == {"stopped"}
    assert db.update_deployment_status("taxi", "deleted") == 1
    assert db.list_deployments(status="running") == []
    assert len(db.list_deployments(limit=1)) == 1
    with pytest.raises(ValueError, match="status is one of"):
        db.update_deployment_status("taxi", "gone")


# -- datetimes --------------------------------------------------------------------------------

def test_datetimes_come_back_timezone_aware_utc(db: Store) -> None:
    now = datetime.now(timezone.utc)
    run_id = db.create_run("demo", module="demo.py", params={})
    db.add_stages(run_id, [_stage("load")])
    # a non-UTC aware datetime is stored as the same instant
    east = datetime.now(timezone(timedelta(hours=5)))
    db.update_stage(run_id, "load", started_at=now, finished_at=east)
    db.finish_run(run_id, RunStatus.SUCCEEDED)

    run = db.get_run(run_id)
    for value in (run.created_at, run.finished_at, run.stage("load").started_at, run.stage("load").finished_at):
        _assert_utc(value, near=now)
    assert run.stage("load").finished_at == east
    _assert_utc(db.list_runs()[0].created_at, near=now)


def test_postgresql_datetimes_are_utc_whatever_the_session_time_zone(postgres_url: str) -> None:
    url = make_url(postgres_url)
    options = f"{url.query.get('options', '')} -ctimezone=America/New_York".strip()
    store = open_store(url.update_query_dict({"options": options}).render_as_string(hide_password=False))
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW timezone").scalar() == "America/New_York"
        now = datetime.now(timezone.utc)
        run_id = store.create_run("demo", module="demo.py", params={})
        store.add_stages(run_id, [_stage("load", started_at=now)])
        store.finish_run(run_id, RunStatus.SUCCEEDED)
        run = store.get_run(run_id)
        for value in (run.created_at, run.finished_at, run.stage("load").started_at):
            _assert_utc(value, near=now)
        assert run.stage("load").started_at == now
    finally:
        store.close()


# -- opening -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "is not a database URL; expected e.g. 'sqlite:///"),
        ("", "is not a database URL"),
        ("postgresql://someone:s3cret@127.0.0.1:1/nowhere", "cannot open the store at 'postgresql://someone:"),
        ("nosuchdb://host/x", "cannot open the store at 'nosuchdb://host/x': Can't load plugin"),
        ("sqlite:////proc/airflowless-nope/store.db", "cannot open the store at 'sqlite:////proc/airflowless-nope"),
    ],
)
def test_a_bad_url_raises_store_error_with_a_helpful_message(url: str, expected: str) -> None:
    with pytest.raises(StoreError) as info:
        open_store(url)
    message = str(info.value)
    assert expected in message
    assert "s3cret" not in message  # never print a password
    assert isinstance(info.value, AirflowlessError)


def test_a_missing_driver_names_it() -> None:
    with pytest.raises(StoreError, match=r"the driver for 'mysql' is not installed \(MySQLdb\)"):
        open_store("mysql://someone@127.0.0.1/x")


def test_open_store_defaults_to_the_file_under_airflowless_home(home: Path) -> None:
    store = open_store()
    try:
        assert store.url == f"sqlite:///{home / 'airflowless.db'}"
        store.create_run("demo", module="demo.py", params={})
    finally:
        store.close()
    assert (home / "airflowless.db").is_file()  # the home folder was created for it
    again = open_store()
    try:
        assert again.count_runs() == 1
    finally:
        again.close()


def test_open_store_uses_airflowless_db(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "elsewhere" / "record.db"
    monkeypatch.setenv("AIRFLOWLESS_DB", f"sqlite:///{target}")
    store = open_store()
    try:
        assert store.url == f"sqlite:///{target}"
        store.create_run("demo", module="demo.py", params={})
    finally:
        store.close()
    assert target.is_file()
    assert not (home / "airflowless.db").exists()


def test_open_store_uses_airflowless_db_for_postgresql(
    home: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOWLESS_DB", postgres_url)
    store = open_store()
    try:
        assert store.engine.dialect.name == "postgresql"
        assert store.version == MIGRATIONS[-1].version
        run_id = store.create_run("demo", module="demo.py", params={})
        assert store.get_run(run_id).pipeline == "demo"
    finally:
        store.close()
    assert not (home / "airflowless.db").exists()


def test_in_memory_sqlite_store_works() -> None:
    store = open_store("sqlite://")  # the example in the module docstring
    try:
        run_id = store.create_run("demo", module="demo.py", params={"n": 1})
        store.add_stages(run_id, [_stage("load")])
        assert store.get_run(run_id).status == RunStatus.RUNNING
        assert [s.node for s in store.get_run(run_id).stages] == ["load"]
    finally:
        store.close()
