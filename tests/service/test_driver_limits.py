"""The service's per-run limits on the drivers it starts: a driver past its memory or its time is stopped,
its stages are cancelled, and its run is recorded failed with the limit it passed; the service goes on.

A real service process on the session's cluster; the drivers are its children.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflowless.service.deploy import submit
from airflowless.store import RunStatus, open_store
from tests.support.eventually import eventually
from tests.support.processes import start_service, stop

_MODULE = '''
import time
from airflowless import pipeline, stage

HELD = []

@stage(cache=False)
def wait(seconds: float) -> float:
    for _ in range(int(seconds * 10)):  # short sleeps: a cancel stops it between two
        time.sleep(0.1)
    return seconds

@pipeline
def hungry(megabytes: int = 0, seconds: float = 0.1):
    held = bytearray(megabytes * 2**20)  # the driver's own memory: the pipeline function runs there
    held[::4096] = b"x" * len(held[::4096])
    HELD.append(held)  # kept while the run goes on
    return wait(seconds)
'''


@pytest.mark.usefixtures("home")
def test_a_driver_past_the_services_memory_or_time_is_stopped_and_its_run_fails_saying_which(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "pipelines" / "hungry.py"
    module.parent.mkdir()
    module.write_text(_MODULE)
    store = open_store(db)
    greedy = submit(str(module), params={"megabytes": 1200, "seconds": 60}, store=store)
    slow = submit(str(module), params={"seconds": 60}, store=store)
    log = tmp_path / "service.log"
    service = start_service(db, cluster_client.scheduler.address, log,
                            env={"AIRFLOWLESS_DRIVER_MEMORY_MB": "800", "AIRFLOWLESS_DRIVER_TIMEOUT_S": "10"})
    try:
        ended = lambda run: store.get_run(run).status in RunStatus.TERMINAL  # noqa: E731
        eventually(lambda: ended(greedy) and ended(slow), timeout=90, message=lambda: log.read_text()[-3000:])
        within = submit(str(module), params={"seconds": 0.1}, store=store)  # the service goes on
        eventually(lambda: ended(within), timeout=60, message=lambda: log.read_text()[-3000:])
    finally:
        stop(service)
    greedy_run, slow_run = store.get_run(greedy), store.get_run(slow)
    assert greedy_run.status == RunStatus.FAILED
    assert "its driver used" in greedy_run.error and "over the service's limit of 800 MiB" in greedy_run.error
    assert slow_run.status == RunStatus.FAILED
    assert "its driver ran longer than 10 s" in slow_run.error
    assert slow_run.stage("wait").status == "cancelled"  # SIGTERM: the driver cancelled its stage as on Ctrl-C
    assert store.get_run(within).status == RunStatus.SUCCEEDED


@pytest.mark.usefixtures("home")
def test_a_service_adopts_the_drivers_a_killed_service_left_running_holding_them_to_its_limits(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Service A (no limits) starts a long run and is SIGKILLed; its driver runs on. Service B, started with a
    time limit, adopts that driver: it stops it past the limit (counted from the driver's start) and records
    why, and copies its log to the run's storage."""
    import signal

    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "hungry.py"
    module.write_text(_MODULE)
    store = open_store(db)
    slow = submit(str(module), params={"seconds": 120}, store=store)
    log = tmp_path / "service.log"
    first = start_service(db, cluster_client.scheduler.address, log)
    try:
        eventually(lambda: [s.status for s in store.get_run(slow).stages] == ["running"], timeout=60,
                   message=lambda: log.read_text()[-3000:])
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert store.get_run(slow).status == RunStatus.RUNNING  # its driver runs on, alone
    second = start_service(db, cluster_client.scheduler.address, log, env={"AIRFLOWLESS_DRIVER_TIMEOUT_S": "12"})
    try:
        eventually(lambda: store.get_run(slow).status == RunStatus.FAILED, timeout=90,  # not the cancel SIGTERM made
                   message=lambda: log.read_text()[-3000:])
    finally:
        stop(second)
    run = store.get_run(slow)
    assert run.status == RunStatus.FAILED and "its driver ran longer than 12 s" in (run.error or ""), run.error
    assert f"run {slow}: adopted its driver" in log.read_text()
    assert run.driver_log_uri and f"driver of run {slow}" in Path(run.driver_log_uri).read_text()
    store.close()
