"""Notifications: webhooks to a real local HTTP server, email to a real local SMTP server, a Python function of
the pipeline's module; failures, successes, retries and late runs, once each, retried, recorded, secrets kept out.
The last test runs it all through the service as users run it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflowless.errors import ConfigError
from airflowless.service import notify
from airflowless.service.notify import Notifier, parse_notify
from airflowless.store import RunStatus, Store, open_store, schema
from airflowless.store.liveness import this_driver
from tests.support.eventually import eventually
from tests.support.smtp import Mailbox


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
    ("on_failure=sms:+4912345", "unknown notification channel 'sms'"),
    ("on_failure=email:ops-at-example.com", "takes mail addresses"),
    ("on_failure=python:alert ops", "names a function of the pipeline's module"),
    ("on_failure=webhook:https://hooks.example/T0", "a webhook's URL is a secret"),
    ("on_failure=webhook:env:NOT_HTTP", "not http(s)"),
])
def test_bad_notify_options_are_clear_errors(spec: str, says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOT_HTTP", "ftp://hooks.example/T0")
    with pytest.raises(ConfigError) as raised:
        parse_notify([spec])
    assert says in str(raised.value)


def _running(db: Store, deployment: int, *, age_s: float = 0.0) -> int:
    run_id = db.enqueue_run("p", target="t", params={}, trigger="manual", deployment_id=deployment)
    db.take_queued_run(run_id, module="m", params={}, driver=this_driver(), address=None)
    if age_s:
        with db.engine.begin() as conn:
            conn.execute(schema.pipeline_runs.update().where(schema.pipeline_runs.c.id == run_id).values(
                created_at=datetime.now(timezone.utc) - timedelta(seconds=age_s)))
    return run_id


def test_a_run_past_its_deadline_is_told_once_to_the_late_and_failure_channels(db: Store) -> None:
    later = datetime.now(timezone.utc) - timedelta(hours=1)  # the deployment predates the runs
    deployment = db.create_pipeline_deployment(
        "nightly", pipeline="p", target="t", params={}, schedule=None, now=later, deadline_s=60,
        notify=parse_notify(["on_failure=webhook:env:OPS_HOOK", "on_late=email:ops@example.com",
                             "on_success=email:ml@example.com"]))
    late = _running(db, deployment, age_s=120)
    _running(db, deployment, age_s=10)  # not late yet
    claimed = db.claim_notifications()
    assert sorted((c["run_id"], c["channel"], c["message"]["event"]) for c in claimed) == [
        (late, "email:ops@example.com", "late"), (late, "webhook:env:OPS_HOOK", "late")]
    assert claimed[0]["message"]["deadline_s"] == 60 and "is late: not ended 60 s after" in claimed[0]["message"]["text"]
    assert db.claim_notifications() == []  # once
    db.finish_run(late, RunStatus.FAILED, error="boom")
    (failure,) = db.claim_notifications()  # and its failure after, as a failure
    assert failure["message"]["event"] == "failure" and failure["channel"] == "webhook:env:OPS_HOOK"


def test_a_stage_retried_is_told_once_while_the_run_goes_on(db: Store) -> None:
    later = datetime.now(timezone.utc) - timedelta(hours=1)
    deployment = db.create_pipeline_deployment("nightly", pipeline="p", target="t", params={}, schedule=None,
                                               now=later, notify=parse_notify(["on_retry=webhook:env:OPS_HOOK"]))
    run_id = _running(db, deployment)
    db.add_stages(run_id, [{"node": "load", "stage": "load", "upstream": [], "cache_key": "k" * 64,
                                    "status": "running"}])
    assert db.claim_notifications() == []
    db.update_stages(run_id, {"load": {"attempts": 2, "error": "ConnectionError: the lake is down"}})
    (retry,) = db.claim_notifications()
    assert retry["message"]["event"] == "retry" and retry["message"]["stage"] == "load"
    assert "is retrying stage load: ConnectionError: the lake is down" in retry["message"]["text"]
    db.update_stages(run_id, {"load": {"attempts": 3}})
    assert db.claim_notifications() == []  # once per run


def test_email_goes_to_a_real_smtp_server_and_a_python_function_of_the_module_is_called(
        db: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "alerting.py"
    module.write_text(f'''
import json
from pathlib import Path

def alert(message):
    Path({str(tmp_path / "called.json")!r}).write_text(json.dumps(message))

def broken(message):
    raise RuntimeError("the pager is off")
''')
    with Mailbox() as box:
        monkeypatch.setenv("AIRFLOWLESS_SMTP", box.url)
        monkeypatch.setenv("AIRFLOWLESS_SMTP_FROM", "airflowless@ml.example.com")
        deployment = db.create_pipeline_deployment(
            "nightly", pipeline="p", target=f"{module}:p", params={}, schedule=None,
            notify=parse_notify(["on_failure=email:ops@example.com,ml@example.com", "on_failure=python:alert",
                                 "on_failure=python:broken"]))
        failed = _ended(db, deployment, RunStatus.FAILED)
        notifier = Notifier(db)
        assert notifier.tick() == 3
        eventually(lambda: all(n["status"] in ("sent", "failed") for n in db.notifications_of(failed)), timeout=60)
        notes = {n["channel"]: n for n in db.notifications_of(failed)}
        assert notes["email:ops@example.com,ml@example.com"]["status"] == "sent"
        assert notes["python:alert"]["status"] == "sent"
        assert notes["python:broken"]["status"] == "failed" and "the pager is off" in notes["python:broken"]["error"]
        (mail,) = box.messages
        assert box.recipients == [["ops@example.com", "ml@example.com"]]
        assert mail["From"] == "airflowless@ml.example.com" and "failed: stage x failed" in mail["Subject"]
        assert json.loads((tmp_path / "called.json").read_text())["run_id"] == failed
        notifier.close()


def test_without_a_mail_server_an_email_is_recorded_failed_at_once(db: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOWLESS_SMTP", raising=False)
    deployment = db.create_pipeline_deployment("nightly", pipeline="p", target="t", params={}, schedule=None,
                                               notify=parse_notify(["on_failure=email:ops@example.com"]))
    failed = _ended(db, deployment, RunStatus.FAILED)
    Notifier(db).tick()
    (note,) = eventually(lambda: [n for n in db.notifications_of(failed) if n["status"] == "failed"], timeout=30)
    assert note["attempts"] == 1 and "set AIRFLOWLESS_SMTP" in note["error"]


_FLAKY = '''
import time
from airflowless import pipeline, stage

@stage
def slow_then_fail(seconds: float) -> int:
    time.sleep(seconds)
    raise ValueError("the model diverged")

@pipeline
def flaky(seconds: float = 0.1):
    return slow_then_fail(seconds)
'''


@pytest.mark.usefixtures("home")
def test_through_the_service_a_late_then_failed_run_sends_one_late_and_one_failure_on_each_channel(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflowless.service.deploy import deploy, trigger
    from tests.support.processes import start_service, stop

    module = tmp_path / "flaky.py"
    module.write_text(_FLAKY)
    db_url = f"sqlite:///{tmp_path / 'record.db'}"
    store = open_store(db_url)
    with pytest.raises(ConfigError, match="--deadline says when something is late"):
        deploy(str(module), "flaky", deadline="3s", store=store)
    with pytest.raises(ConfigError, match="has no function 'page_me'"):
        deploy(str(module), "flaky", notify=["on_failure=python:page_me"], store=store)
    deploy(str(module), "flaky", deadline="3s", store=store,
           notify=["on_failure=webhook:env:OPS_HOOK", "on_failure=email:ops@example.com"])
    hook = _Hook()
    log = tmp_path / "service.log"
    with Mailbox() as box:
        service = start_service(db_url, cluster_client.scheduler.address, log,
                                {"OPS_HOOK": hook.url, "AIRFLOWLESS_SMTP": box.url})
        try:
            run_id = trigger("flaky", params={"seconds": 6.0}, store=store)
            eventually(lambda: store.get_run(run_id).status == RunStatus.FAILED, timeout=90,
                       message=lambda: log.read_text()[-3000:])
            eventually(lambda: len(hook.received) == 2 and len(box.messages) == 2, timeout=60,
                       message=lambda: f"{hook.received} {len(box.messages)} {log.read_text()[-2000:]}")
            time.sleep(2.0)  # and nothing more
        finally:
            stop(service)
            hook.close()
    assert [m["event"] for m in hook.received] == ["late", "failure"]
    assert "the model diverged" in hook.received[1]["text"]
    assert ["is late" in m["Subject"] for m in box.messages] == [True, False]
    assert {(n["event"], n["status"]) for n in store.notifications_of(run_id)} == {
        ("on_late", "sent"), ("on_failure", "sent")}


def test_a_deployment_that_starts_no_run_for_longer_than_expected_is_told_once_per_silence(
        db: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _Hook()
    monkeypatch.setenv("OPS_HOOK", hook.url)
    hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    try:
        deployment = db.create_pipeline_deployment(
            "score-days", pipeline="score_day", target="t", params={}, schedule=None, now=hour_ago,
            expect_every_s=600, notify=parse_notify(["on_late=webhook:env:OPS_HOOK", "on_success=email:a@b.example"]))
        (alert,) = db.claim_notifications()
        assert alert["about"] == "deployment" and alert["message"]["event"] == "late_data"
        assert "started no run for more than 600 s" in alert["message"]["text"] and "data is late" in \
            alert["message"]["text"]
        assert db.claim_notifications() == []  # once per silence
        notifier = Notifier(db)
        notifier._send(alert)
        (row,) = db.deployment_alerts(deployment)
        assert row["status"] == "sent" and row["since"] == hour_ago and len(hook.received) == 1
        _ended(db, deployment, RunStatus.SUCCEEDED)  # data came: a new silence starts from this run
        assert [c["message"]["event"] for c in db.claim_notifications()] == ["success"]
        assert [c["message"]["event"] for c in db.claim_notifications(
            now=datetime.now(timezone.utc) + timedelta(minutes=11))] == ["late_data"]
        notifier.close()
    finally:
        hook.close()
