"""Deployments that follow other deployments' runs: chains over intervals, fan-in, states, once each, no cycles.

On both backends (SQLite file and the real PostgreSQL); the upstream runs are ended through the record.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflowless.errors import ConfigError, ParameterError
from airflowless.service.schedules import Schedule, parse_after
from airflowless.store import RunStatus, Store, open_store
from airflowless.store.liveness import this_driver

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


@pytest.fixture
def db(backend_url: str) -> Iterator[Store]:
    store = open_store(backend_url)
    yield store
    store.close()


def _deploy(db: Store, name: str, *, after: list[str] | None = None, schedule: Schedule | None = None) -> int:
    return db.create_pipeline_deployment(name, pipeline=name, target=f"/x/{name}.py:{name}", params={},
                                         schedule=schedule, after=parse_after(after or []), now=T0)


def _end(db: Store, run_id: int, status: str = RunStatus.SUCCEEDED) -> None:
    db.take_queued_run(run_id, module="m", params={}, driver=this_driver(), address=None)
    db.finish_run(run_id, status)


def test_a_chain_of_three_follows_each_run_once_with_its_interval(db: Store) -> None:
    _deploy(db, "extract", schedule=Schedule.parse(every=3600))
    _deploy(db, "features", after=["extract"])
    _deploy(db, "train", after=["features:succeeded"])
    (first,) = db.schedule_due(T0 + timedelta(hours=1, seconds=1))
    assert db.queue_followers() == []  # nothing ended yet
    _end(db, first)
    (features,) = db.queue_followers()
    assert db.queue_followers() == []  # once
    run = db.get_run(features)
    assert (run.trigger, run.upstream_run, run.upstream_runs) == ("after", first, {"extract": first})
    assert (run.interval_start, run.interval_end) == (T0, T0 + timedelta(hours=1))  # the chain keeps the interval
    _end(db, features)
    (train,) = db.queue_followers()
    assert db.get_run(train).upstream_runs == {"features": features}


def test_only_the_chosen_states_start_a_follower_and_runs_before_it_was_deployed_do_not(db: Store) -> None:
    _deploy(db, "nightly")
    early = db.enqueue_run("nightly", target="t", params={}, trigger="manual",
                           deployment_id=db.get_pipeline_deployment("nightly")["id"])
    _end(db, early)  # ended before the follower existed
    db.create_pipeline_deployment("page-someone", pipeline="p", target="t", params={}, schedule=None,
                                  after=parse_after(["nightly:failed,timed_out"]))
    assert db.queue_followers() == []
    nightly_id = db.get_pipeline_deployment("nightly")["id"]
    ok, bad = (db.enqueue_run("nightly", target="t", params={}, trigger="manual", deployment_id=nightly_id)
               for _ in range(2))
    _end(db, ok)
    _end(db, bad, RunStatus.FAILED)
    (alert,) = db.queue_followers()
    assert db.get_run(alert).upstream_run == bad


def test_fan_in_runs_once_each_upstream_has_a_new_success(db: Store) -> None:
    ids = {name: _deploy(db, name) for name in ("sales", "weather")}
    _deploy(db, "forecast", after=["sales", "weather"])

    def ended(name: str) -> int:
        run_id = db.enqueue_run(name, target="t", params={}, trigger="manual", deployment_id=ids[name])
        _end(db, run_id)
        return run_id

    first_sales = ended("sales")
    assert db.queue_followers() == []  # weather has nothing new
    second_sales = ended("sales")
    weather = ended("weather")
    (forecast,) = db.queue_followers()
    assert db.get_run(forecast).upstream_runs == {"sales": second_sales, "weather": weather}
    assert first_sales < second_sales
    ended("weather")
    assert db.queue_followers() == []  # sales has nothing new since
    ended("sales")
    assert len(db.queue_followers()) == 1


def test_unknown_upstreams_bad_states_and_cycles_are_refused(db: Store) -> None:
    _deploy(db, "a")
    _deploy(db, "b", after=["a"])
    _deploy(db, "c", after=["b"])
    with pytest.raises(ConfigError, match=r"do not exist: \['nope'\]"):
        _deploy(db, "d", after=["nope"])
    with pytest.raises(ConfigError, match="run states it ends in"):
        _deploy(db, "d", after=["a:finished"])
    with pytest.raises(ConfigError, match="a trigger cycle: a runs after c runs after b runs after a"):
        db.create_pipeline_deployment("a", pipeline="a", target="t", params={}, schedule=None,
                                      after=parse_after(["c"]), replace=True)
    with pytest.raises(ConfigError, match="a trigger cycle: a runs after a"):
        db.create_pipeline_deployment("a", pipeline="a", target="t", params={}, schedule=None,
                                      after=parse_after(["a"]), replace=True)
    with pytest.raises(ConfigError, match="has one trigger"):
        _deploy(db, "e", after=["a"], schedule=Schedule.parse(every=60))
    with pytest.raises(ConfigError, match="share their states"):
        parse_after(["a:failed", "b"])


_UPSTREAM = '''
from airflowless import pipeline, stage

@stage
def extract(day: str) -> str:
    return day

@pipeline
def extract_day(day: str = "2026-11-01"):
    return extract(day)
'''

_DOWNSTREAM = '''
import datetime as dt
from airflowless import pipeline, stage

@stage
def train(day: dt.date) -> str:
    return day.isoformat()

@pipeline
def train_day(day: dt.date, epochs: int = 1):
    return train(day)
'''


def test_a_follower_takes_chosen_parameters_of_the_run_it_follows(db: Store, tmp_path: Path) -> None:
    from airflowless.service.deploy import deploy
    from airflowless.service.files import typed

    (tmp_path / "extract_day.py").write_text(_UPSTREAM)
    (tmp_path / "train_day.py").write_text(_DOWNSTREAM)
    upstream, downstream = str(tmp_path / "extract_day.py"), str(tmp_path / "train_day.py")
    deploy(upstream, "extract", store=db)
    with pytest.raises(ConfigError, match="add --after NAME"):
        deploy(downstream, "train", pass_params=["day"], store=db)
    with pytest.raises(ConfigError, match="which pipeline 'train_day' does not take"):
        deploy(downstream, "train", after=["extract"], pass_params=["when=day"], store=db)
    with pytest.raises(ConfigError, match="whose pipeline 'extract_day' has no such parameter"):
        deploy(downstream, "train", after=["extract"], pass_params=["day=date"], store=db)
    with pytest.raises(ParameterError, match="needs parameter"):  # day is required and nothing sets it
        deploy(downstream, "train", after=["extract"], store=db)
    deploy(downstream, "train", after=["extract"], pass_params=["day"], store=db)

    run = db.enqueue_run("extract_day", target="t", params={"day": "2026-11-03"}, trigger="manual",
                         deployment_id=db.get_pipeline_deployment("extract")["id"])
    db.take_queued_run(run, module="m", params={"day": "2026-11-03"}, driver=this_driver(), address=None)
    db.finish_run(run, RunStatus.SUCCEEDED)
    (follower,) = db.queue_followers()
    record = db.get_run(follower)
    assert record.params == {"day": "2026-11-03"} and record.upstream_run == run
    # the driver parses what the trigger passed as text to the pipeline's types
    from airflowless.dag import load_pipeline

    names = db.trigger_text_params(record.deployment_id)
    assert names == ["day"]
    assert typed({"day": record.params["day"]}, load_pipeline(downstream).params) == {"day": date(2026, 11, 3)}
    with pytest.raises(ConfigError, match="no one run to take them from"):
        parse_after(["extract", "train"], ["day"])
