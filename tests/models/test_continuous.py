"""Continuous training end to end (pipelines/taxi_continuous.py): eight simulated days on a clock the test moves.

The service runs in this process with the test's clock; its drivers are real child processes that join the
session's cluster. Each day lands as a folder and is scored by the champion (a file trigger); a retraining
with a deliberately broken labelling job (half the labels flipped) is registered but rejected; the weekly
schedule's retraining beats the champion and is promoted; the deployment bound to
``models:/taxi-big-tip@champion`` rolls to it under load, never serving the rejected version, with no failed
request.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

import tests.serve.conftest as serve_conftest
from airflowless import models, serve
from airflowless.control import service_api
from airflowless.errors import ConfigError
from airflowless.service.deploy import deploy, trigger
from airflowless.service.files import FileSpec
from airflowless.service.service import Service
from airflowless.store import RunStatus, open_store
from pipelines.taxi_continuous import MODEL, land_day
from tests.support.eventually import eventually

serve_url = serve_conftest.serve_url  # the fixture

MODULE = str(Path(__file__).resolve().parents[2] / "pipelines" / "taxi_continuous.py")
UTC = timezone.utc
ROW = {"passenger_count": 1, "trip_distance": 2.4, "fare_amount": 12.5, "trip_duration": 840.0, "hour": 22,
       "day_of_week": 5, "payment_type": 1}
ENDED = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SKIPPED, RunStatus.CANCELLED}


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class _Load(threading.Thread):
    """A client asking the served model about one trip in a loop: every answer, every failure."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.seen: Counter[float] = Counter()
        self.failures: list[str] = []

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.wait(0.02):
                try:
                    answer = client.post(self.url, json=[ROW])
                    if answer.status_code == 200:
                        self.seen[round(answer.json()["predictions"][0], 6)] += 1
                    else:
                        self.failures.append(f"{answer.status_code}: {answer.text[:200]}")
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))


def _offline(version: int) -> float:
    """What version ``version`` predicts for the trip, scored here."""
    import asyncio

    from airflowless.serve.predictor import Predictor

    answer = asyncio.run(Predictor(models.get(MODEL, version).checkpoint).predict([ROW]))
    return round(float(answer["predictions"][0]), 6)


def _output(run: Any, stage: str) -> Any:
    """What stage ``stage`` of ``run`` returned, read back from the storage."""
    from airflowless.dag.outputs import read_output

    return read_output(run.stage(stage).output_uri)


def test_eight_days_score_daily_promote_one_better_model_and_never_serve_a_worse_one(
        serve_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster_client: Any) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    # the service's drivers run their pipelines on the session's cluster (a real scheduler they join), as a
    # service beside `cluster up` does, instead of starting an embedded cluster each
    monkeypatch.setenv("AIRFLOWLESS_ADDRESS", cluster_client.scheduler.address)
    days, scores = tmp_path / "days", tmp_path / "scores"
    first = date(2026, 11, 3)  # a Tuesday: the weekly retraining (Mondays 03:00) falls on the seventh day
    for n in range(4, 0, -1):
        land_day(str(days), first - timedelta(days=n), rows=3_000)  # history
    time.sleep(0.5)  # whole (quiet) before the deployment: there already, so not new
    store = open_store(db)
    clock = _Clock(datetime(2026, 11, 2, 12, tzinfo=UTC))
    deploy(f"{MODULE}:score_new_day", "taxi-score", params={"out": str(scores)}, store=store, now=clock.now,
           on_new_files=FileSpec.parse(f"{days}/date=*/", params={"day": "date"}, quiet_s=0.3))
    deploy(f"{MODULE}:retrain", "taxi-retrain", params={"root": str(days)}, cron="0 3 * * 1", store=store,
           now=clock.now)
    service = Service(store, db, clock=clock)
    stop = threading.Event()
    loop = threading.Thread(target=service.run, args=(stop,), daemon=True)
    loop.start()

    def settled() -> bool:
        return all(r.status in ENDED for r in store.list_runs(limit=100))

    def runs_of(name: str) -> list[Any]:
        deployment = store.get_pipeline_deployment(name)["id"]
        return sorted((r for r in store.list_runs(limit=100) if r.deployment_id == deployment), key=lambda r: r.id)

    load = None
    try:
        # the first champion: a quick one (one boosting round), trained by hand on the history
        trigger("taxi-retrain", params={"num_boost_round": 1}, store=store)
        eventually(lambda: len(runs_of("taxi-retrain")) == 1 and settled(), timeout=180)
        assert runs_of("taxi-retrain")[0].status == RunStatus.SUCCEEDED, runs_of("taxi-retrain")[0].error
        assert models.get(MODEL, alias="champion", store=store).version == 1

        serve.run(serve.PredictorDeployment.bind(f"models:/{MODEL}@champion"), name="taxi", route_prefix="/taxi")
        load = _Load(f"{serve_url}/taxi/predict")
        load.start()

        for n in range(8):
            day = first + timedelta(days=n)
            clock.now = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=4)
            land_day(str(days), day, rows=3_000)
            if n == 2:  # a retraining on a broken labelling job: registered, judged worse, not promoted
                trigger("taxi-retrain", params={"label_noise": 0.5}, store=store)
            eventually(lambda d=day: any(r.params["day"] == d.isoformat() for r in runs_of("taxi-score"))
                       and settled(), timeout=180)

        scored = [store.get_run(r.id) for r in runs_of("taxi-score")]
        assert [r.params["day"] for r in scored] == [(first + timedelta(days=n)).isoformat() for n in range(8)]
        assert all(r.status == RunStatus.SUCCEEDED for r in scored), [r.error for r in scored]
        by_day = {r.params["day"]: _output(r, "check_quality") for r in scored}
        assert all(result["rows"] == 3_000 and result["accuracy"] > 0.6 for result in by_day.values())
        assert pq.read_table(scores / "date=2026-11-05").num_rows == 3_000
        assert {by_day[(first + timedelta(days=n)).isoformat()]["model"] for n in range(6)} == {f"models:/{MODEL}/1"}

        retrains = [store.get_run(r.id) for r in runs_of("taxi-retrain")]
        assert [r.trigger for r in retrains] == ["manual", "manual", "schedule"]
        assert retrains[2].interval_end == datetime(2026, 11, 9, 3, tzinfo=UTC)
        assert all(r.status == RunStatus.SUCCEEDED for r in retrains), [r.error for r in retrains]
        rejected, promoted = (_output(r, "register_and_promote") for r in retrains[1:])
        assert (rejected["version"], rejected["promoted"]) == (2, False), rejected
        assert (promoted["version"], promoted["promoted"]) == (3, True), promoted
        assert models.get(MODEL, 2, store=store).tags["decision"] == "rejected"
        assert models.get(MODEL, 3, store=store).tags == {"trained_on": "2026-11-05..2026-11-07",
                                                          "holdout": "2026-11-08", "decision": "promoted"}
        assert [h["version"] for h in store.model_alias_history(MODEL, "champion")] == [3, 1]
        lineage = models.get(MODEL, 3, store=store)
        assert lineage.run_id == retrains[2].id and lineage.stage == "register_and_promote"
        assert lineage.datasets["train"]["paths"] == [f"{days}/date=2026-11-0{d}/part-0.parquet" for d in (5, 6, 7)]
        assert lineage.datasets["holdout"]["files"] == 1
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", lineage.code_version or ""), lineage.code_version

        # serving rolled to the promoted version by itself; the rejected one never answered a request
        v1, v2, v3 = _offline(1), _offline(2), _offline(3)
        assert len({v1, v2, v3}) == 3
        eventually(lambda: load.seen[v3] > 20, timeout=60, message=lambda: f"served so far: {dict(load.seen)}")
        assert by_day["2026-11-10"]["model"] == f"models:/{MODEL}/3"

        # which deployment serves which version: serve's status, the record, the REST API; a served version
        # cannot be deleted
        assert serve.status()["taxi"]["deployments"]["PredictorDeployment"]["models"] == [f"models:/{MODEL}/3"]
        eventually(lambda: list(store.model_servers(MODEL)) == [3], timeout=10)
        (served,) = [v for v in service_api.registered_model(store, MODEL)["versions"] if v["served_by"]]
        assert served["version"] == 3 and served["served_by"][0]["app"] == "taxi"
        models.set_alias(MODEL, "champion", 1, store=store)  # the alias elsewhere: still served until it rolls
        with pytest.raises(ConfigError, match="version 3 of model 'taxi-big-tip' is served by taxi/PredictorDep"):
            models.delete_version(MODEL, 3, store=store)
        eventually(lambda: list(store.model_servers(MODEL)) == [1], timeout=60)
        models.delete_version(MODEL, 3, store=store)
    finally:
        if load is not None:
            load.stop.set()
            load.join(30)
        stop.set()
        loop.join(30)
        store.close()
    assert load.failures == [], load.failures[:5]
    assert set(load.seen) == {v1, v3} and load.seen[v2] == 0, dict(load.seen)  # never the rejected version
    serve.delete("taxi")
