"""Runs whose driver died: the service settles them ``abandoned`` and, for deployments that ask
(``deploy --resume-abandoned N``), queues a resume that reuses what the dead run finished, at most N times.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from airflowless.service.deploy import deploy, trigger
from airflowless.store import RunStatus, open_store
from airflowless.store.liveness import Driver
from tests.support.eventually import eventually
from tests.support.processes import start_service, stop

_DEAD = Driver(socket.gethostname(), 2**22 - 7, 1.0)  # no process of this host started at 1.0 (1970)

_MODULE = '''
import time
from pathlib import Path
from airflowless import pipeline, stage

@stage(cache_key=lambda folder: "one folder")  # not keyed by the files under it: this test writes there
def prepare(folder: str) -> str:
    with open(f"{folder}/prepared", "a") as log:
        log.write("x")
    return "ready"

@stage(cache=False)
def finish(folder: str, ready: str) -> str:
    while not Path(f"{folder}/go").exists():
        time.sleep(0.1)
    return ready + " and done"

@pipeline
def fragile(folder: str):
    return finish(folder, prepare(folder))
'''


def test_the_record_resumes_a_run_whose_driver_died_as_often_as_its_deployment_allows(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'record.db'}")
    store.create_pipeline_deployment("nightly", pipeline="p", target="p.py", params={"n": 1}, schedule=None,
                                     resume_abandoned=1)
    store.create_pipeline_deployment("plain", pipeline="p", target="p.py", params={}, schedule=None)
    nightly, plain = (store.get_pipeline_deployment(name)["id"] for name in ("nightly", "plain"))
    first = store.enqueue_run("p", target="p.py", params={"n": 1}, trigger="manual", deployment_id=nightly)
    other = store.enqueue_run("p", target="p.py", params={}, trigger="manual", deployment_id=plain)
    for run in (first, other):
        store.take_queued_run(run, module="p.py", params=store.get_run(run).params, driver=_DEAD, address=None)

    ((dead, resume),) = store.resume_abandoned_runs()
    assert dead == first and resume is not None
    queued = store.get_run(resume)
    assert (queued.status, queued.trigger, queued.resumed_from, queued.params) == ("queued", "resume", first, {"n": 1})
    assert store.get_run(first).status == RunStatus.ABANDONED and store.get_run(first).resumed_by == resume
    assert store.get_run(other).status == RunStatus.ABANDONED  # read so, but left alone: no resume asked
    assert store.resume_abandoned_runs() == []  # once: the dead run is settled

    store.take_queued_run(resume, module="p.py", params={"n": 1}, driver=_DEAD, address=None)  # it dies too
    assert store.resume_abandoned_runs() == [(resume, None)]  # its deployment's one resume is spent
    assert "not resumed: resumed 1 time(s) already" in (store.get_run(resume).error or "")
    assert store.resume_abandoned_runs() == []


@pytest.mark.usefixtures("home")
def test_the_service_resumes_a_run_whose_driver_was_killed_reusing_what_it_finished(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "fragile.py"
    module.write_text(_MODULE)
    folder = tmp_path / "work"
    folder.mkdir()
    store = open_store(db)
    deploy(str(module), "fragile", params={"folder": str(folder)}, resume_abandoned=1, store=store)
    log = tmp_path / "service.log"
    service = start_service(db, cluster_client.scheduler.address, log, env={"AIRFLOWLESS_HEARTBEAT_S": "0.5"})
    try:
        first = trigger("fragile", store=store)
        eventually(lambda: store.get_run(first).stages and store.get_run(first).stage("finish").status
                   == "running", timeout=60, message=lambda: log.read_text()[-3000:])
        os.kill(store.get_run(first).driver_pid, signal.SIGKILL)
        eventually(lambda: store.get_run(first).resumed_by, timeout=30, message=lambda: log.read_text()[-3000:])
        (folder / "go").touch()
        resumed = store.get_run(first).resumed_by
        eventually(lambda: store.get_run(resumed).status in RunStatus.TERMINAL, timeout=60,
                   message=lambda: log.read_text()[-3000:])
    finally:
        stop(service)
    dead, again = store.get_run(first), store.get_run(resumed)
    assert dead.status == RunStatus.ABANDONED and dead.stage("finish").status == "abandoned"
    assert again.status == RunStatus.SUCCEEDED, again.error
    assert (again.trigger, again.resumed_from) == ("resume", first)
    assert again.stage("prepare").status == "cached" and again.stage("prepare").reused_from_run == first
    assert (folder / "prepared").read_text() == "x", "what the dead run finished is reused, not run again"
