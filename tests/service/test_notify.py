"""Notifications of runs' ends: webhooks to a real local HTTP server, once each, retried, recorded, secrets kept out."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflowless.errors import ConfigError
from airflowless.service import notify
from airflowless.service.notify import Notifier, parse_notify
from airflowless.store import RunStatus, Store, open_store
from airflowless.store.liveness import this_driver
from tests.support.eventually import eventually


class _Hook:
    """A webhook receiver on loopback: what it got, and the status it answers."""

    def __init__(self, status: int = 200) -> None:
        self.received: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append(json.loads(body))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Store]:
    store = open_store(f"sqlite:///{tmp_path / 'record.db'}")
    yield store
    store.close()


def _ended(db: Store, deployment: int, status: str) -> int:
    run_id = db.enqueue_run("p", target="t", params={}, trigger="manual", deployment_id=deployment)
    db.take_queued_run(run_id, module="m", params={}, driver=this_driver(), address=None)
    db.finish_run(run_id, status, error="stage x failed: ValueError" if status != RunStatus.SUCCEEDED else None)
    return run_id


def test_a_failed_and_a_succeeded_run_each_post_one_message_and_the_record_says_so(
        db: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _Hook()
    monkeypatch.setenv("OPS_HOOK", hook.url)
    try:
        deployment = db.create_pipeline_deployment(
            "nightly", pipeline="p", target="t", params={}, schedule=None,
            notify=parse_notify(["on_failure=webhook:env:OPS_HOOK", "on_success=webhook:env:OPS_HOOK"]))
        failed = _ended(db, deployment, RunStatus.FAILED)
        succeeded = _ended(db, deployment, RunStatus.SUCCEEDED)
        notifier = Notifier(db)
        assert notifier.tick() == 2
        assert notifier.tick() == 0 and db.claim_notifications() == []  # once, whoever looks again
        eventually(lambda: len(hook.received) == 2 and all(
            n["status"] == "sent" for r in (failed, succeeded) for n in db.notifications_of(r)), timeout=30)
        by_run = {m["run_id"]: m for m in hook.received}
        assert by_run[failed]["event"] == "failure" and by_run[failed]["schema"] == "airflowless.notification/1"
        assert by_run[failed]["error"] == "stage x failed: ValueError" and by_run[failed]["deployment"] == "nightly"
        assert "failed: stage x failed" in by_run[failed]["text"]
        assert by_run[succeeded]["event"] == "success"
        (note,) = db.notifications_of(failed)
        assert note["channel"] == "webhook:env:OPS_HOOK" and hook.url not in json.dumps(note, default=str)
        with db.engine.connect() as conn:  # the URL is nowhere in the record
            assert hook.url not in json.dumps([list(r) for r in conn.exec_driver_sql(
                "SELECT * FROM pipeline_deployments")], default=str)
        notifier.close()
    finally:
        hook.close()


def test_a_channel_that_fails_is_retried_then_recorded_failed_without_blocking_the_others(
        db: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    broken, working = _Hook(status=500), _Hook()
    monkeypatch.setenv("BROKEN_HOOK", broken.url)
    monkeypatch.setenv("GOOD_HOOK", working.url)
    monkeypatch.setattr(notify, "ATTEMPTS", 2)
    try:
        deployment = db.create_pipeline_deployment(
            "nightly", pipeline="p", target="t", params={}, schedule=None,
            notify=parse_notify(["on_failure=webhook:env:BROKEN_HOOK", "on_failure=webhook:env:GOOD_HOOK"]))
        failed = _ended(db, deployment, RunStatus.FAILED)
        Notifier(db).tick()
        eventually(lambda: {n["channel"]: n["status"] for n in db.notifications_of(failed)} == {
            "webhook:env:BROKEN_HOOK": "failed", "webhook:env:GOOD_HOOK": "sent"}, timeout=30)
        (bad,) = [n for n in db.notifications_of(failed) if n["status"] == "failed"]
        assert bad["attempts"] == 2 and "500" in bad["error"] and len(broken.received) == 2
        assert len(working.received) == 1
    finally:
        broken.close()
        working.close()


def test_runs_that_ended_before_the_deployment_notified_are_not_sent(db: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_HOOK", "http://127.0.0.1:9/never")
    deployment = db.create_pipeline_deployment("nightly", pipeline="p", target="t", params={}, schedule=None)
    _ended(db, deployment, RunStatus.FAILED)
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    db.create_pipeline_deployment("nightly", pipeline="p", target="t", params={}, schedule=None, replace=True,
                                  notify=parse_notify(["on_failure=webhook:env:OPS_HOOK"]), now=later)
    assert db.claim_notifications() == []


@pytest.mark.parametrize(("spec", "says"), [
    ("on_fire=webhook:env:X", "EVENT one of"),
    ("on_failure=email:ops@example.com", "unknown notification channel 'email'"),
    ("on_failure=webhook:https://hooks.example/T0", "a webhook's URL is a secret"),
    ("on_failure=webhook:env:NOT_HTTP", "not http(s)"),
])
def test_bad_notify_options_are_clear_errors(spec: str, says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOT_HTTP", "ftp://hooks.example/T0")
    with pytest.raises(ConfigError) as raised:
        parse_notify([spec])
    assert says in str(raised.value)
