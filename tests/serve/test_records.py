"""serve's rows in the store: recorded by run, marked by delete, redeploy and shutdown; never fatal."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflowless import serve
from airflowless.store import open_store

from .deployments import Busy, Echo, Ingress


def _rows(app: str) -> list[dict[str, Any]]:
    store = open_store()
    try:
        return [r for r in store.list_deployments(limit=1000) if r["app"] == app]
    finally:
        store.close()


def test_run_records_each_deployment_and_delete_marks_them(serve_url: str, serve_home: Path) -> None:
    serve.run(Ingress.bind(Echo.bind("!")), name="rec", route_prefix="/rec")
    rows = {r["deployment"]: r for r in _rows("rec")}
    assert set(rows) == {"Echo", "Ingress"}
    echo = rows["Echo"]
    assert (echo["status"], echo["num_replicas"], rows["Ingress"]["num_replicas"]) == ("running", 2, 1)
    assert (echo["route_prefix"], echo["http_address"]) == ("/rec", serve_url)
    assert (echo["pid"], echo["hostname"]) == (os.getpid(), socket.gethostname())
    assert echo["config"]["num_replicas"] == 2 and echo["config"]["max_ongoing_requests"] == 100
    assert open_store().url == f"sqlite:///{serve_home / 'airflowless.db'}"  # the module's private store

    serve.run(Ingress.bind(Echo.bind("?")), name="rec", route_prefix="/rec")  # deployed again
    statuses = sorted((r["deployment"], r["status"]) for r in _rows("rec"))
    assert statuses == [("Echo", "replaced"), ("Echo", "running"), ("Ingress", "replaced"),
                        ("Ingress", "running")]
    serve.delete("rec")
    assert {r["status"] for r in _rows("rec")} == {"replaced", "deleted"}


def test_autoscaled_deployment_records_its_initial_replicas(serve_url: str) -> None:
    serve.run(Busy.bind(), name="auto", route_prefix="/auto")
    (row,) = _rows("auto")
    assert row["num_replicas"] == 1 and row["config"]["autoscaling_config"]["max_replicas"] == 2
    serve.delete("auto")


def test_a_broken_store_is_logged_and_serving_goes_on(serve_url: str, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AIRFLOWLESS_DB", "not a database url")
    with caplog.at_level(logging.WARNING, logger="airflowless.serve.records"):
        serve.run(Echo.bind("x"), name="nostore", route_prefix="/nostore")
        assert httpx.post(f"{serve_url}/nostore", json=1).json()["got"] == 1
        serve.delete("nostore")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("could not record" in m and "serving goes on" in m for m in messages)
    monkeypatch.delenv("AIRFLOWLESS_DB")
    assert _rows("nostore") == []


def test_shutdown_marks_every_app_of_this_process_stopped(cluster_client: object) -> None:
    serve.start(http_options={"port": 0})
    serve.run(Echo.bind("a"), name="one", route_prefix="/one")
    serve.run(Busy.bind(), name="two", route_prefix=None)
    serve.delete("one")
    serve.run(Echo.bind("b"), name="three", route_prefix="/three")
    serve.shutdown()
    assert [r["status"] for r in _rows("one")] == ["deleted"]
    assert [r["status"] for r in _rows("two")] == ["stopped"]
    assert [r["status"] for r in _rows("three")] == ["stopped"]
    assert _rows("two")[0]["route_prefix"] is None
