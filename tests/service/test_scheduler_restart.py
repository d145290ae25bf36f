"""The service keeps working when the Dask scheduler dies and comes back.

A real `dask scheduler` and worker, a real service process joined to them: the
scheduler gets SIGKILL while a run's stage is running; that run fails cleanly
(recorded ``failed``, saying the cluster was lost); a new scheduler on the same
address comes up, and the next submission runs there without restarting the
service (it holds no Dask connection of its own: each run's driver joins).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from airflowless.runtime.processes import start_process_cluster, stop_process_cluster
from airflowless.service.deploy import submit
from airflowless.store import RunStatus, open_store
from tests.support.eventually import eventually
from tests.support.processes import start_service, stop

_MODULE = '''
import time
from airflowless import pipeline, stage

@stage(cache=False)
def wait(seconds: float) -> float:
    for _ in range(int(seconds * 10)):
        time.sleep(0.1)
    return seconds

@pipeline
def waiting(seconds: float = 0.1):
    return wait(seconds)
'''


@pytest.mark.usefixtures("home")
def test_a_run_in_flight_fails_cleanly_when_the_scheduler_dies_and_the_next_runs_on_its_successor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "waiting.py"
    module.write_text(_MODULE)
    store = open_store(db)
    cluster = start_process_cluster(n_workers=1, log_dir=tmp_path / "first")
    port = int(cluster.address.rsplit(":", 1)[1])
    log = tmp_path / "service.log"
    service = start_service(db, cluster.address, log)
    second = None
    try:
        in_flight = submit(str(module), params={"seconds": 60}, store=store)
        eventually(lambda: store.get_run(in_flight).stages and store.get_run(in_flight).stage("wait").status
                   == "running", timeout=60, message=lambda: log.read_text()[-3000:])
        os.killpg(cluster.scheduler_pid, signal.SIGKILL)
        eventually(lambda: store.get_run(in_flight).status in RunStatus.TERMINAL, timeout=90,
                   message=lambda: log.read_text()[-3000:])
        stop_process_cluster(cluster)  # its worker
        second = start_process_cluster(n_workers=1, scheduler_port=port, log_dir=tmp_path / "second")
        assert second.address == cluster.address
        after = submit(str(module), params={"seconds": 0.1}, store=store)
        eventually(lambda: store.get_run(after).status in RunStatus.TERMINAL, timeout=90,
                   message=lambda: log.read_text()[-3000:])
        assert service.poll() is None, "the service went down with the scheduler"
    finally:
        stop(service)
        if second is not None:
            stop_process_cluster(second)
        stop_process_cluster(cluster)
    lost = store.get_run(in_flight)
    assert lost.status == RunStatus.FAILED, lost
    assert f"the cluster at {cluster.address} went away during run {in_flight}" in (lost.error or ""), lost.error
    assert lost.stage("wait").status == "failed"
    assert store.get_run(after).status == RunStatus.SUCCEEDED, store.get_run(after).error
