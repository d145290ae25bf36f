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
    status, answer = call(base + "pipeline-deployments/hourly/trigger", method="POST", token="t0ken",
                          body={"params": {"n_rows": "8"}})  # text, as a form sends it: parsed as --param does
    assert status == 200 and store.get_run(answer["run_id"]).params == {"n_rows": 8}, answer
    store.cancel_queued_run(answer["run_id"], "not needed")

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


_TYPED = '''
from airflowless import pipeline, stage

@stage
def total(n: int, rate: float, exact: bool, tags: list[str], day: str) -> float:
    return n * rate

@pipeline
def typed(n: int, rate: float = 0.5, exact: bool = False, tags: list[str] | None = None, day: str = "monday"):
    return total(n, rate, exact, tags or [], day)
'''


def test_a_deployments_parameters_are_read_from_its_module_with_the_values_a_trigger_runs_with(
        tmp_path: Path, control_server: Any) -> None:
    """What the page's Trigger form is built from; and the last runs' stages, for its grid."""
    url = f"sqlite:///{tmp_path / 'record.db'}"
    module = tmp_path / "typed.py"
    module.write_text(_TYPED)
    store = open_store(url)
    deployment_id = deploy(str(module), "typed", params={"n": 3, "tags": ["x"]}, store=store)["id"]
    base = control_server(ControlContext(url, token="t0ken")) + V1

    status, refused = call(base + "pipeline-deployments/typed/parameters")  # it imports the module: the token
    assert status == 401 and "reading a pipeline's parameters" in refused["error"], refused
    status, described = call(base + "pipeline-deployments/typed/parameters", token="t0ken")
    assert status == 200, described
    assert described["parameters"] == [
        {"name": "n", "type": "int", "required": True, "default": None, "deployed": True, "value": 3},
        {"name": "rate", "type": "float", "required": False, "default": 0.5, "deployed": False, "value": 0.5},
        {"name": "exact", "type": "bool", "required": False, "default": False, "deployed": False, "value": False},
        {"name": "tags", "type": "list[str] | None", "required": False, "default": None, "deployed": True,
         "value": ["x"]},
        {"name": "day", "type": "str", "required": False, "default": "monday", "deployed": False,
         "value": "monday"}]
    assert call(base + "pipeline-deployments/nope/parameters", token="t0ken")[0] == 404

    # the grid: each of the last runs with its stages, a mapped stage's items left to the run's page
    run_id = store.enqueue_run("typed", target="t", params={}, trigger="manual", deployment_id=deployment_id)
    store.add_stages(run_id, [{"node": node, "stage": node.partition("[")[0], "status": how, "upstream": up,
                               "cache_key": node}
                              for node, how, up in [("make", "succeeded", []), ("score[0]", "succeeded", ["make"]),
                                                    ("score[1]", "failed", ["make"]),
                                                    ("score", "failed", ["make", "score[0]", "score[1]"])]])
    store.finish_run(run_id, RunStatus.FAILED)
    status, listed = call(base + "pipeline-deployments")
    assert [(r["id"], r["status"], r["stages"]) for r in listed["deployments"][0]["last_runs"]] == [
        (run_id, "failed", [{"node": "make", "status": "succeeded"}, {"node": "score", "status": "failed"}])]

    # a module that no longer imports: a 422 saying why, the deployment still there
    module.write_text("import no_such_module_anywhere\n")
    status, answer = call(base + "pipeline-deployments/typed/parameters", token="t0ken")
    assert status == 422 and "cannot read the parameters of deployment 'typed'" in answer["error"], answer
    assert "no_such_module_anywhere" in answer["error"], answer
    store.close()
