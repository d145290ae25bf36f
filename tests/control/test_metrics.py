"""``airflowless_*`` metrics scraped from the real embedded scheduler's ``/metrics`` after real work."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflowless import pipeline, stage
from airflowless.control import metrics
from airflowless.control.context import ControlContext
from tests.control.test_actions import control  # noqa: F401 - the fixture
from tests.support.eventually import eventually


@stage
def one() -> int:
    return 1


@stage
def two(value: int) -> int:
    return value + 1


@pipeline
def counted():
    return two(one())


def _scrape(ctx: ControlContext) -> dict[str, Any]:
    """Every sample of ``/metrics`` by family name, parsed with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    from airflowless.control import mount

    base = mount.link(ctx.scheduler).removesuffix("/airflowless/")
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _trial(config: dict[str, Any]) -> dict[str, float]:
    return {"loss": config["x"]}


@pytest.mark.timeout(180)
def test_stage_trial_and_serve_metrics_are_scraped_from_the_scheduler(control: ControlContext,  # noqa: F811
                                                                      home: Path) -> None:
    from airflowless import serve, tune

    counted.run(cache=False)
    tune.Tuner(_trial, param_space={"x": tune.grid_search([1, 2, 3])},
               tune_config=tune.TuneConfig(metric="loss", mode="min")).fit()

    @serve.deployment
    def ping(body: Any) -> Any:
        return {"ok": True}

    serve.run(ping.bind(), name="metered", route_prefix="/ping")
    try:
        for _ in range(5):
            request = urllib.request.Request(f"{serve.http_address()}/ping", data=b"{}", method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                json.loads(response.read())

        def served() -> Any:
            families = _scrape(control)
            requests = [s for s in families.get("airflowless_serve_requests", [])
                        if s.labels == {"app": "metered", "deployment": "ping"} and s.name.endswith("_total")]
            counted_runs = [s for s in families.get("airflowless_stage_runs", []) if s.labels["pipeline"] == "counted"]
            return families if requests and requests[0].value == 5 and counted_runs else None

        families = eventually(served, timeout=30)
    finally:
        serve.shutdown()
    runs = {(s.labels["stage"], s.labels["outcome"]): s.value
            for s in families["airflowless_stage_runs"] if s.labels["pipeline"] == "counted"}
    assert runs == {("one", "succeeded"): 1, ("two", "succeeded"): 1}
    counts = [s for s in families["airflowless_stage_duration_seconds"]
              if s.name.endswith("_count") and s.labels["pipeline"] == "counted"]
    assert sorted(s.value for s in counts) == [1, 1]
    trials = {s.labels["state"]: s.value for s in families["airflowless_trials"]}
    assert trials.get("completed") == 3, trials
    latency = [s for s in families["airflowless_serve_request_duration_seconds"]
               if s.name.endswith("_count") and s.labels["app"] == "metered"]
    assert latency[0].value == 5
    assert any(s.labels["app"] == "metered" and s.value == 1 for s in families["airflowless_serve_replicas"])
    assert "dask_scheduler_workers" in families  # distributed's own metrics are still there


def test_registering_twice_keeps_one_collector(control: ControlContext) -> None:  # noqa: F811
    from prometheus_client import REGISTRY

    first = metrics.register(control)
    assert metrics.register(control) is first
    assert sum(1 for c in REGISTRY._collector_to_names if isinstance(c, metrics.AirflowlessCollector)) == 1


def test_the_service_metrics_count_the_queue_runs_by_trigger_and_the_schedule_lag(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from airflowless.service.schedules import Schedule
    from airflowless.store import open_store
    from airflowless.store.liveness import this_driver

    store = open_store(f"sqlite:///{tmp_path / 'record.db'}")
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    store.create_pipeline_deployment("every-minute", pipeline="p", target="t", params={},
                                     schedule=Schedule.parse(every=60), now=t0)
    (scheduled,) = store.schedule_due(t0 + timedelta(seconds=61))
    store.take_queued_run(scheduled, module="m", params={}, driver=this_driver(), address=None)
    store.add_stages(scheduled, [{"node": "a", "stage": "a", "upstream": [], "cache_key": "k", "status": "running",
                                  "started_at": t0 + timedelta(seconds=60.4)}])
    store.enqueue_run("p", target="t", params={}, trigger="submit")
    families = {family.name: family for family in metrics._service_metrics(store)}
    assert [s.value for s in families["airflowless_queued_runs"].samples] == [1.0]
    assert {(s.labels["trigger"], s.labels["status"]): s.value for s in families["airflowless_service_runs"].samples
            } == {("schedule", "running"): 1.0, ("submit", "queued"): 1.0}
    lag = {s.name: s for s in families["airflowless_schedule_lag_seconds"].samples}
    assert lag["airflowless_schedule_lag_seconds_count"].value == 1
    assert abs(lag["airflowless_schedule_lag_seconds_sum"].value - 0.4) < 0.01
    assert [s.value for s in families["airflowless_schedule_lag_seconds"].samples
            if s.labels.get("le") == "0.5"] == [1.0]
    store.close()


def test_metrics_need_the_token_where_the_api_does(control: ControlContext) -> None:  # noqa: F811
    """distributed's ``/metrics`` keeps the API's rule: a request whose Host does not name this machine (a page
    of another site rebound to 127.0.0.1), or any request to a server beyond loopback, needs the token."""
    import http.client
    import urllib.parse

    from airflowless.control import mount

    link = urllib.parse.urlsplit(mount.link(control.scheduler))
    path = link.path.removesuffix("/airflowless/") + "/metrics"

    def get(host: str, token: str | None = None) -> tuple[int, str]:
        conn = http.client.HTTPConnection(link.hostname or "127.0.0.1", link.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Host": host, **({"Authorization": f"Bearer {token}"} if token else {})})
            answer = conn.getresponse()
            return answer.status, answer.read().decode()
        finally:
            conn.close()

    assert get(f"127.0.0.1:{link.port}")[0] == 200
    status, text = get(f"attacker.test:{link.port}")
    assert status == 401 and "does not name this machine" in text and "airflowless_" not in text, text
    assert get(f"attacker.test:{link.port}", "not-the-token")[0] == 403
    assert get(f"attacker.test:{link.port}", control.token)[0] == 200


def test_connections_holding_half_a_request_are_closed(control: ControlContext) -> None:  # noqa: F811
    """The dashboard's server closes a connection that sends no whole request's headers in time (tornado's default:
    an hour, so a thousand such connections were kept); here the limit is lowered to 1 s to see it act."""
    import socket
    import time
    import urllib.parse

    from airflowless.control import mount

    server = control.scheduler.http_server
    assert server.conn_params.header_timeout == mount.HEADER_TIMEOUT_S  # what install() set
    link = urllib.parse.urlsplit(mount.link(control.scheduler))
    mount.limit_header_wait(server, 1.0)
    try:
        held = [socket.create_connection((link.hostname, link.port), timeout=10) for _ in range(20)]
        for sock in held:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never the blank line
        time.sleep(2.5)
        for sock in held:
            sock.settimeout(5)
            assert sock.recv(1024) == b"", "a half-sent request's connection was kept"
            sock.close()
        with urllib.request.urlopen(f"{link.scheme}://{link.netloc}{link.path}api/v1/runs", timeout=30) as answer:
            assert answer.status == 200  # whole requests are answered as before
    finally:
        server.conn_params.header_timeout = mount.HEADER_TIMEOUT_S
