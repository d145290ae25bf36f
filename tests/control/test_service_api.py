"""The service's REST routes over real HTTP: deployments, trigger (parameters checked: 422), pause, backfill, queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflowless.control.context import ControlContext
from airflowless.service.deploy import deploy
from airflowless.store import RunStatus, open_store
from tests.control.conftest import call

V1 = "airflowless/api/v1/"

_MODULE = '''
from airflowless import pipeline, stage

@stage
def rows(n_rows: int, interval_end: str) -> int:
    return n_rows

@pipeline
def hourly(n_rows: int = 10, interval_start: str = "", interval_end: str = ""):
    return rows(n_rows, interval_end)
'''


def test_the_service_routes_read_and_steer_deployments_and_check_parameters(tmp_path: Path,
                                                                            control_server: Any) -> None:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    module = tmp_path / "hourly.py"
    module.write_text(_MODULE)
    store = open_store(url)
    deploy(str(module), "hourly", params={"n_rows": 5}, every=3600, store=store)
    base = control_server(ControlContext(url, token="t0ken")) + V1

    status, listed = call(base + "pipeline-deployments")
    assert status == 200 and [d["name"] for d in listed["deployments"]] == ["hourly"]
    assert listed["deployments"][0]["schedule"] == {"every": 3600.0} and listed["deployments"][0]["params"] == {
        "n_rows": 5}
    assert call(base + "pipeline-deployments/nope")[0] == 404

    # actions need the token; a parameter the pipeline does not take, or of the wrong type, is a 422 naming it
    assert call(base + "pipeline-deployments/hourly/trigger", method="POST")[0] == 401
    status, answer = call(base + "pipeline-deployments/hourly/trigger", method="POST", token="t0ken",
                          body={"params": {"n_rowz": 1}})
    assert status == 422 and "n_rowz" in answer["error"], answer
    status, answer = call(base + "pipeline-deployments/hourly/trigger", method="POST", token="t0ken",
                          body={"params": {"n_rows": "many"}})
    assert status == 422 and "n_rows" in answer["error"], answer
    status, answer = call(base + "pipeline-deployments/hourly/trigger", method="POST", token="t0ken",
                          body={"params": {"n_rows": 7}})
    assert status == 200, answer
    triggered = store.get_run(answer["run_id"])
    assert triggered.status == RunStatus.QUEUED and triggered.trigger == "manual" and triggered.params == {"n_rows": 7}

    status, answer = call(base + "pipeline-deployments/hourly/pause", method="POST", token="t0ken")
    assert status == 200 and store.get_pipeline_deployment("hourly")["paused"]
    call(base + "pipeline-deployments/hourly/unpause", method="POST", token="t0ken")
    assert not store.get_pipeline_deployment("hourly")["paused"]

    status, answer = call(base + "pipeline-deployments/hourly/backfill", method="POST", token="t0ken",
                          body={"start": "2026-11-02T00:00:00+00:00", "end": "2026-11-01T00:00:00+00:00"})
    assert status == 422 and "from an earlier date to a later one" in answer["error"]
    status, answer = call(base + "pipeline-deployments/hourly/backfill", method="POST", token="t0ken",
                          body={"start": "2026-11-01T00:00:00", "end": "yesterday"})
    assert status == 400 and "ISO 8601" in answer["error"]
    status, answer = call(base + "pipeline-deployments/hourly/backfill", method="POST", token="t0ken",
                          body={"start": "2026-11-01T00:00:00+00:00", "end": "2026-11-01T03:00:00+00:00",
                                "max_active_runs": 1})
    assert status == 200 and len(answer["run_ids"]) == 3

    status, queued = call(base + "queue")
    assert status == 200 and [r["id"] for r in queued["runs"]] == [triggered.id, *answer["run_ids"]]
    assert {r["trigger"] for r in queued["runs"]} == {"manual", "backfill"}

    # a queued run is cancelled in the record, with no cluster behind this server
    status, cancelled = call(base + f"runs/{triggered.id}/cancel", method="POST", token="t0ken")
    assert status == 200 and cancelled["was"] == "queued"
    assert store.get_run(triggered.id).status == RunStatus.CANCELLED
    store.close()
