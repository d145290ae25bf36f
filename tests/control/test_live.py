"""The live feeds on a real embedded cluster: a streaming dataset and a serving deployment, as the
scheduler keeps them and as ``/airflowless/api/v1/live/...`` answers them over HTTP."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflowless.control import live
from airflowless.control.context import ControlContext
from tests.control.conftest import call
from tests.control.test_actions import control  # noqa: F401 - the fixture
from tests.support.eventually import eventually


def _get(ctx: ControlContext, what: str) -> Any:
    from airflowless.control import mount

    base = mount.link(ctx.scheduler).removesuffix("/airflowless/")
    status, body = call(f"{base}/airflowless/api/v1/live/{what}")
    assert status == 200, body
    return body


def _slow(batch: Any) -> Any:
    time.sleep(0.3)
    return batch


@pytest.mark.timeout(120)
def test_a_streaming_dataset_shows_its_operators_while_it_runs(control: ControlContext, home: Path) -> None:  # noqa: F811
    from airflowless import data

    seen: list[dict[str, Any]] = []
    began = time.monotonic()
    for _ in data.range(2000, parallelism=20).map_batches(_slow).iter_batches(batch_size=None):
        if not seen and time.monotonic() - began > 1.5:  # past the first second: the executor publishes
            seen.extend(e for e in _get(control, "data")["executions"]
                        if not e["finished"] and any(op["rows"] for op in e["operators"]))
    assert seen, "no message of the running execution showed rows out"
    running = seen[0]
    assert running["budget_bytes"] > 0 and running["waiting"] in ("", "upstream", "budget", "backpressure")
    ended = eventually(lambda: [e for e in _get(control, "data")["executions"]
                                if e["execution"] == running["execution"] and e["finished"]])
    assert sum(op["rows"] or 0 for op in ended[0]["operators"] if op["operator"] == running["dataset"]) == 2000


@pytest.mark.timeout(120)
def test_a_deployment_shows_replicas_workers_and_latency(control: ControlContext) -> None:  # noqa: F811
    from airflowless import serve

    @serve.deployment(num_replicas=2)
    def echo(body: Any) -> Any:
        return body

    serve.run(echo.bind(), name="live-echo", route_prefix="/echo")
    try:
        address = serve.http_address()
        for _ in range(30):
            request = urllib.request.Request(f"{address}/echo", data=json.dumps({"a": 1}).encode(), method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert json.loads(response.read()) == {"a": 1}

        def served() -> Any:
            rows = [d for d in _get(control, "serve")["deployments"] if d["app"] == "live-echo"]
            return rows if rows and rows[0]["requests"] > 0 else None

        row = eventually(served)[0]
        assert row["deployment"] == "echo" and row["target_replicas"] == 2 and row["status"] == "HEALTHY"
        assert row["requests_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]
        workers = {r["worker"] for r in row["replicas"]}
        assert len(row["replicas"]) == 2 and all(w.startswith("tcp://") for w in workers)
    finally:
        serve.shutdown()


def test_the_feeds_keep_the_latest_message_of_each_execution_and_runtime() -> None:
    feeds = live.LiveFeeds()
    for step in range(3):
        feeds.log_event(live.DATA_TOPIC, {"execution": "a", "dataset": "d", "operators": [], "step": step,
                                          "time": time.time()})
    for index in range(30):  # finished ones beyond the kept count are dropped
        feeds.log_event(live.DATA_TOPIC, {"execution": f"f{index}", "dataset": "d", "operators": [],
                                          "finished": True, "time": time.time()})
    feeds.log_event(live.DATA_TOPIC, {"execution": "a", "dataset": "d", "operators": [], "step": 1,
                                      "time": time.time() - 5})  # sent before the last, arrived after it
    view = feeds.data_view()["executions"]
    assert view[0]["execution"] == "a" and view[0]["step"] == 2 and len(view) == 21
    deployment = {"app": "x", "deployment": "y", "requests": 3, **live.latency_summary([0.002, 0.004, 0.2])}
    feeds.log_event(live.SERVE_TOPIC, {"runtime": "r", "deployments": [deployment], "time": time.time()})
    feeds.log_event(live.SERVE_TOPIC, {"runtime": "gone", "deployments": [deployment], "time": time.time() - 60})
    assert [d["app"] for d in feeds.serve_view()["deployments"]] == ["x"]
    assert feeds.serve_totals[("x", "y")]["requests"] == 6


def test_a_throttle_is_due_once_per_interval_after_the_first() -> None:
    throttle = live.Throttle(0.2)
    assert not throttle.due() and not throttle.fired
    time.sleep(0.25)
    assert throttle.due() and not throttle.due() and throttle.fired
