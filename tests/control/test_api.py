"""The REST API over real HTTP: reads of a record a real pipeline and a real Tuner wrote, errors, routing.

The server is the real tornado control server (``mount.start_server``) on
loopback; the record is filled by a pipeline and a Tuner on the session's real
cluster, or by the store's own API for the shape-and-error cases.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from airflowless import pipeline, stage, tune
from airflowless.control import api, openapi
from airflowless.control.context import ControlContext
from airflowless.store import open_store, schema
from airflowless.train import Checkpoint, RunConfig
from tests.control.conftest import call
from tests.control.conftest import call as http

V1 = "airflowless/api/v1/"


@stage
def numbers(n: int) -> list[int]:
    return list(range(n))


@stage
def total(values: list[int]) -> int:
    return sum(values)


@stage
def broken(value: int) -> int:
    raise ValueError(f"no good: {value}")


@pipeline
def summed(n: int):
    return total(numbers(n))


@pipeline
def fails(n: int):
    return broken(total(numbers(n)))


def trainable(config: dict[str, Any]) -> None:
    for it in range(1, 4):
        folder = tempfile.mkdtemp()
        Path(folder, "state.json").write_text(json.dumps({"it": it}))
        tune.report({"loss": config["x"] / it, "it": it}, checkpoint=Checkpoint.from_directory(folder))


@pytest.mark.timeout(240)
@pytest.mark.usefixtures("cluster_client")
def test_reads_show_what_a_real_pipeline_and_tuner_recorded(home: Path, control_server: Any) -> None:
    store = open_store()
    first = summed.run({"n": 4}, store=store)
    again = summed.run({"n": 4}, store=store)  # every stage a cache hit
    failed = fails.run({"n": 3}, store=store, raise_on_failure=False)
    grid = tune.Tuner(trainable, param_space={"x": tune.grid_search([1.0, 2.0])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=RunConfig(name="api-grid")).fit()
    assert grid.errors == []
    base = control_server(ControlContext(store.url))

    status, body = call(base + V1 + "runs?limit=10")
    assert status == 200
    assert [r["id"] for r in body["runs"]] == [failed.run_id, again.run_id, first.run_id]
    assert [r["status"] for r in body["runs"]] == ["failed", "succeeded", "succeeded"]

    status, run = call(base + V1 + f"runs/{first.run_id}")
    assert status == 200 and run["pipeline"] == "summed" and run["params"] == {"n": 4}
    assert {s["node"]: (s["status"], s["attempts"], s["cache_hit"]) for s in run["stages"]} == {
        "numbers": ("succeeded", 1, False), "total": ("succeeded", 1, False)}
    assert all(s["duration_s"] is not None and s["duration_s"] >= 0 for s in run["stages"])
    _, cached = call(base + V1 + f"runs/{again.run_id}")
    assert all(s["cache_hit"] for s in cached["stages"]), cached["stages"]
    _, bad = call(base + V1 + f"runs/{failed.run_id}")
    stage_broken = next(s for s in bad["stages"] if s["node"] == "broken")
    assert stage_broken["status"] == "failed" and "no good: 3" in stage_broken["error"]
    assert "Traceback" in stage_broken["traceback"] and "ValueError" in stage_broken["traceback"]

    status, listed = call(base + V1 + "experiments")
    assert status == 200
    (experiment,) = [e for e in listed["experiments"] if e["name"] == "api-grid"]
    assert experiment["trials"] == {"completed": 2} and experiment["metric"] == "loss"
    status, shown = call(base + V1 + f"experiments/{experiment['id']}")
    assert status == 200 and shown["status"] == "completed"
    trials = {t["config"]["x"]: t for t in shown["trials"]}
    assert set(trials) == {1.0, 2.0}
    assert trials[2.0]["last_metrics"]["loss"] == pytest.approx(2.0 / 3)
    trial_id = trials[2.0]["id"]

    status, one = call(base + V1 + f"trials/{trial_id}")
    assert status == 200 and one["experiment_id"] == experiment["id"] and one["iterations"] == 3
    status, metrics = call(base + V1 + f"trials/{trial_id}/metrics")
    assert status == 200 and [row["step"] for row in metrics["metrics"]] == [1, 2, 3]
    assert {"loss", "it"} <= set(metrics["names"])
    assert [row["loss"] for row in metrics["metrics"]] == pytest.approx([2.0, 1.0, 2.0 / 3])
    _, only = call(base + V1 + f"trials/{trial_id}/metrics?name=it&name=absent")
    assert [sorted(row) for row in only["metrics"]] == [["it", "step"]] * 3
    status, every = call(base + V1 + f"experiments/{experiment['id']}/metrics")  # the curves of a whole search
    assert status == 200 and every["experiment_id"] == experiment["id"] and {"loss", "it"} <= set(every["names"])
    assert sorted(t["trial_id"] for t in every["trials"]) == sorted(t["id"] for t in shown["trials"])
    assert {t["trial_id"]: t["metrics"] for t in every["trials"]}[trial_id] == metrics["metrics"]
    _, one_trial = call(base + V1 + f"experiments/{experiment['id']}/metrics?trial={trial_id}&trial=999&name=it")
    assert [t["trial_id"] for t in one_trial["trials"]] == [trial_id]  # 999 is in no such experiment: left out
    assert one_trial["trials"][0]["metrics"] == only["metrics"]
    status, kept = call(base + V1 + f"trials/{trial_id}/checkpoints")
    assert status == 200 and kept["checkpoints"] and all(c["uri"] for c in kept["checkpoints"])
    assert [c["step"] for c in kept["checkpoints"]] == sorted(c["step"] for c in kept["checkpoints"])
    store.close()


@pytest.fixture
def record(tmp_path: Path) -> tuple[str, dict[str, int]]:
    """A SQLite record written with the store's own API: a run, an experiment with a trial, a deployment."""
    url = f"sqlite:///{tmp_path / 'record.db'}"
    store = open_store(url)
    run_id = store.create_run("taxi", module="pipelines.taxi", params={"n": 1})
    store.add_stages(run_id, [{"node": "load", "stage": "load", "upstream": [], "cache_key": "k1",
                               "status": "pending"}])
    driver_log = tmp_path / "driver.log"  # as if a service had started its driver
    driver_log.write_text("driver of run 1\n")
    with store.engine.begin() as conn:
        conn.execute(schema.pipeline_runs.update().values(driver_log_uri=str(driver_log)))
    experiment_id = store.create_experiment("grid", kind="tune", config={}, metric="loss", mode="min")
    trial_id = store.add_trial(experiment_id, "t0", config={"lr": 0.1})
    store.add_metrics(trial_id, 1, {"loss": float("nan"), "acc": 0.5})
    store.record_deployment("taxi", "Predictor", route_prefix="/", num_replicas=2,
                            http_address="http://127.0.0.1:8000", config={}, pid=1)
    store.create_pipeline_deployment("nightly", pipeline="taxi", target="pipelines/taxi.py:taxi", params={},
                                     schedule=None)
    store.create_model_version("nightly", uri="/models/0a", digest="0a" * 32, metrics={"auc": 0.8})
    store.close()
    return url, {"run": run_id, "experiment": experiment_id, "trial": trial_id}


def test_bad_input_is_a_json_error_with_a_4xx_status(record: tuple[str, dict[str, int]],
                                                      control_server: Any) -> None:
    url, ids = record
    base = control_server(ControlContext(url, token="t0ken")) + V1
    cases = {
        "runs/abc": 400, "runs/0": 404, "runs/99999999999999999999": 404, "runs/-1": 400, "runs/1.5": 400,
        "runs?limit=0": 400, "runs?limit=x": 400, "runs?limit=1001": 400, "experiments/999": 404,
        "trials/999": 404, "trials/999/metrics": 404, "trials/999/checkpoints": 404, "trials/x/metrics": 400,
        "experiments/999/metrics": 404, "experiments/x/metrics": 400, "experiments/1/metrics?trial=x": 400,
        "experiments/1/metrics?trial=0": 404,
        "deployments?status=gone": 400, "nothing/here": 404, "": 404, "live/other": 404,
    }
    for path, expected in cases.items():
        status, body = call(base + path)
        assert (status, set(body)) == (expected, {"error"}), (path, body)
        assert "Traceback" not in body["error"]
    status, body = call(base + f"runs/{ids['run']}/cancel")  # GET on an action
    assert status == 405 and "error" in body
    for bad_body in (b"", b"not json", b"[]", b'{"replicas": -1}', b'{"replicas": "2"}', b'{"replicas": true}',
                     b'{"replicas": 1.5}', b"\xff\xfe"):
        status, body = call(base + "deployments/taxi/Predictor/scale", method="POST", token="t0ken", body=bad_body)
        assert status == 400 and "replicas" in body["error"], bad_body

    _, metrics = call(base + f"trials/{ids['trial']}/metrics")
    assert metrics["metrics"] == [{"step": 1, "loss": None, "acc": 0.5}]  # NaN is kept as null: valid JSON
    _, every = call(base + f"experiments/{ids['experiment']}/metrics")
    assert every["trials"] == [{"trial_id": ids["trial"], "metrics": metrics["metrics"]}]
    _, deployments = call(base + "deployments?status=running")
    assert [(d["app"], d["num_replicas"]) for d in deployments["deployments"]] == [("taxi", 2)]
    _, live = call(base + "live/serve")
    assert live["available"] is False and "no cluster" in live["reason"]


def test_no_store_is_503_and_says_how_to_configure_one(control_server: Any) -> None:
    base = control_server(ControlContext(None)) + V1
    status, body = call(base + "runs")
    assert status == 503 and "AIRFLOWLESS_DB" in body["error"]


def test_openapi_document_lists_every_route_and_every_listed_path_answers(
        record: tuple[str, dict[str, int]], control_server: Any) -> None:
    url, ids = record
    base = control_server(ControlContext(url, token="t0ken"))
    status, document = call(base + V1 + "openapi.json")
    assert status == 200 and document == json.loads(json.dumps(openapi.document()))
    assert document["openapi"].startswith("3.")
    routed = {pattern for pattern, *_ in api.routes(ControlContext(None))}
    values = {"run_id": ids["run"], "experiment_id": ids["experiment"], "trial_id": ids["trial"],
              "app": "taxi", "deployment": "Predictor", "name": "nightly", "node": "load"}
    for path, item in document["paths"].items():
        concrete = path.format(**values)
        assert any(re.fullmatch(pattern, concrete) for pattern in routed
                   if not pattern.endswith("(?:/.*)?")), f"{path} documented but not routed"
        for method in item:
            body = {"replicas": 1} if method == "post" and "scale" in path else None
            status, answer = call(base + concrete.lstrip("/"), method=method.upper(), token="t0ken", body=body)
            if method == "get":
                assert status == 200, (path, answer)
            elif "pipeline-" in path:  # the service's actions write the record: no cluster needed
                assert status in {200, 400, 422}, (path, status, answer)
            else:  # an action: routed to airflowless.control.actions, which says this server has no cluster
                assert status in {404, 409, 503} and set(answer) == {"error"}, (path, status, answer)
                assert "no API route" not in answer["error"]
    concrete_paths = [path.format(**values) for path in document["paths"]]
    for pattern in routed - {api.PREFIX + "(?:/.*)?"}:
        assert any(re.fullmatch(pattern, path) for path in concrete_paths), f"{pattern} routed but not documented"


def test_a_deployment_whose_serving_process_is_gone_reads_stopped(tmp_path: Path, control_server: Any) -> None:
    import os
    import socket
    import subprocess
    import sys

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
    dead_pid, here = int(finished.stdout), socket.gethostname()
    url = f"sqlite:///{tmp_path / 'record.db'}"
    store = open_store(url)
    for app, pid in (("alive", os.getpid()), ("killed", dead_pid)):  # a serve.run that got SIGKILL: no shutdown
        store.record_deployment(app, "Model", route_prefix=f"/{app}", num_replicas=1, http_address=None,
                                config={}, pid=pid, hostname=here)
    store.close()
    base = control_server(ControlContext(url)) + V1
    _, every = call(base + "deployments")
    assert {d["app"]: (d["status"], d.get("process")) for d in every["deployments"]} == {
        "alive": ("running", None), "killed": ("stopped", "gone")}
    _, running = call(base + "deployments?status=running")
    assert [d["app"] for d in running["deployments"]] == ["alive"]
    _, stopped = call(base + "deployments?status=stopped")
    assert [d["app"] for d in stopped["deployments"]] == ["killed"]


def test_a_stages_logs_are_read_by_attempt_and_in_pages_and_a_service_runs_driver_log_too(
        tmp_path: Path, control_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the run page's log panel reads: the latest attempt by default, any attempt by number, from a byte
    offset (a character cut by a page's end waits for the next page); the driver's log of a service's run."""
    from airflowless.control import reads
    from airflowless.service.driver_logs import END_MARK
    from airflowless.store.liveness import this_driver

    url = f"sqlite:///{tmp_path / 'record.db'}"
    store = open_store(url)
    logs = tmp_path / "storage" / "runs" / "1" / "logs"
    logs.mkdir(parents=True)
    (logs / "score[3].attempt-1.log").write_text("first try\nValueError: no\n")
    (logs / "score[3].attempt-2.log").write_text("second try: é\n")
    run_id = store.enqueue_run("taxi", target="pipelines/taxi.py", params={}, trigger="manual")
    store.set_run_driver(run_id, this_driver(), log_uri=str(tmp_path / "driver.log"))
    (tmp_path / "driver.log").write_text("driver of run 1\n")
    store.add_stages(run_id, [{"node": "score[3]", "stage": "score", "upstream": [], "cache_key": "k", "status":
                               "succeeded", "attempts": 2, "log_uri": str(logs / "score[3].attempt-2.log")},
                              {"node": "quiet", "stage": "quiet", "upstream": [], "cache_key": "q",
                               "status": "pending"}])
    server = control_server(ControlContext(url, token="t0ken")) + V1
    base = server + f"runs/{run_id}/logs"

    def call(url: str) -> tuple[int, Any]:
        return http(url, token="t0ken")

    status, refused = http(base + "/score%5B3%5D")  # logs are the owner's: the token, also on loopback
    assert status == 401 and "reading logs" in refused["error"], refused
    status, page = call(base + "/score%5B3%5D")
    assert status == 200, page
    assert (page["attempt"], page["attempts"], page["text"], page["done"]) == (2, 2, "second try: é\n", True)
    assert page["next_offset"] == len("second try: é\n".encode())
    status, page = call(base + "/score%5B3%5D?attempt=1&offset=10")
    assert (page["attempt"], page["text"], page["done"]) == (1, "ValueError: no\n", True)  # an earlier one ended
    status, page = call(base + "/score%5B3%5D?offset=" + str(page["next_offset"] + 100))
    assert status == 200 and page["text"] == ""  # past the end: nothing yet
    assert call(base + "/quiet")[1]["attempts"] == 0  # no attempt yet: an empty page
    driver = call(base)[1]
    assert (driver["text"], driver["done"]) == ("driver of run 1\n", False)  # the service may copy more
    with (tmp_path / "driver.log").open("ab") as copy:  # as the service ends the copy once the driver ended
        copy.write(END_MARK)
    assert call(base + f"?offset={driver['next_offset']}")[1]["done"] is True

    assert call(base + "/score%5B3%5D?attempt=3")[0] == 404
    assert call(base + "/nope")[0] == 404
    assert call(base + "/score%5B3%5D?offset=-1")[0] == 400
    assert call(base + "/score%5B3%5D?attempt=x")[0] == 400
    other = store.create_run("taxi", module="pipelines/taxi.py", params={})
    status, answer = call(server + f"runs/{other}/logs")
    assert status == 404 and "only runs the service starts" in answer["error"]

    # a page's end inside a character: the character waits for the next page
    (logs / "score[3].attempt-2.log").write_text("é" * 10)
    monkeypatch.setattr(reads, "LOG_PAGE_BYTES", 5)
    first = reads.run_log(store, run_id, "score[3]")
    assert first["text"] == "éé" and first["next_offset"] == 4
    assert reads.run_log(store, run_id, "score[3]", offset=4)["text"] == "éé"
    store.close()
