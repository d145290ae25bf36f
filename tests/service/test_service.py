"""The service as users run it: a process of its own, drivers as its children, killed and started again.

A deployment every 2 s (catch-up on, one run at a time) and a submission run
on the session's cluster; the service is SIGKILLed mid-schedule and started
again; a deployment whose module breaks is marked broken while the service
goes on. The record must show every interval once, none missed, never two
runs of the deployment at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflowless.service.deploy import deploy, submit, trigger
from airflowless.service.driver_logs import END_MARK
from airflowless.store import RunStatus, open_store
from tests.support.eventually import eventually
from tests.support.processes import start_service as _service
from tests.support.processes import stop

_MODULE = '''
import time
from airflowless import pipeline, stage

@stage
def work(interval_end: str, seconds: float) -> str:
    time.sleep(seconds)
    return interval_end

@pipeline
def ticking(interval_start: str = "", interval_end: str = "", seconds: float = 0.3):
    return work(interval_end, seconds)
'''


def _overlaps(spans: list[tuple[float, float]]) -> int:
    """The most spans that hold at one moment."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = held = 0
    for _, step in edges:
        held += step
        most = max(most, held)
    return most


@pytest.mark.usefixtures("home")
def test_the_service_runs_a_schedule_and_a_submission_and_after_a_sigkill_misses_and_doubles_nothing(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "pipelines" / "ticking.py"
    module.parent.mkdir()
    module.write_text(_MODULE)
    broken = tmp_path / "pipelines" / "breaks.py"
    broken.write_text(_MODULE)
    store = open_store(db)
    deploy(str(module), "ticking", every=2, catchup=True, max_active_runs=1, store=store)
    deploy(str(broken), "breaks", store=store)
    submitted = submit(str(module), params={"seconds": 0.1}, store=store)  # its folder uploaded: the code as now
    assert store.get_run(submitted).target.startswith("submission:")
    address = cluster_client.scheduler.address
    log = tmp_path / "service.log"
    first = _service(db, address, log)
    try:
        scheduled = lambda: [r for r in store.list_runs(limit=500) if r.trigger == "schedule"]  # noqa: E731
        eventually(lambda: sum(r.status == RunStatus.SUCCEEDED for r in scheduled()) >= 3, timeout=90,
                   message=lambda: log.read_text()[-3000:])
        eventually(lambda: store.get_run(submitted).status == RunStatus.SUCCEEDED, timeout=60)

        # a second service on the same SQLite record is refused, with what to do
        second = subprocess.run([sys.executable, "-m", "airflowless.cli", "service", "start", "--db", db],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert "already serves the SQLite record" in second.stderr and "PostgreSQL" in second.stderr

        # the deployment (not uploaded) loads its file at each run: once broken, its run fails with the error,
        # the deployment says so, the service goes on
        broken.write_text("raise ImportError('the feature store moved')\n")
        failed = trigger("breaks", store=store)
        eventually(lambda: store.get_run(failed).status == RunStatus.FAILED, timeout=60)
        assert "the feature store moved" in (store.get_run(failed).error or "")
        assert "the feature store moved" in (store.get_pipeline_deployment("breaks")["broken"] or "")

        eventually(lambda: _warm_drivers(db), message="a warm driver waiting for the next run")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_at = time.time()
        orphans = _warm_drivers(db)
        eventually(lambda: not any(_alive(p) for p in orphans), timeout=30,
                   message="the killed service's warm driver to end by itself")
        time.sleep(4)  # two ticks due while no service runs
        first = _service(db, address, log)
        eventually(lambda: any(r.status == RunStatus.SUCCEEDED and r.interval_end.timestamp() > killed_at + 6
                               for r in scheduled()), timeout=90, message=lambda: log.read_text()[-3000:])
    finally:
        stop(first)
    eventually(lambda: not _warm_drivers(db), timeout=30, message="the stopped service's warm driver to end")
    # drivers outlive their service: let those in flight end
    eventually(lambda: not any(r.status == RunStatus.RUNNING for r in store.list_runs(limit=500)), timeout=60)

    runs = sorted(scheduled(), key=lambda r: r.interval_end)
    ends = [r.interval_end for r in runs]
    assert len(set(ends)) == len(ends), "an interval ran twice"
    assert all(b - a == timedelta(seconds=2) for a, b in zip(ends, ends[1:], strict=False)), f"a gap: {ends}"
    assert all(r.interval_start == r.interval_end - timedelta(seconds=2) for r in runs)
    done = [r for r in runs if r.status == RunStatus.SUCCEEDED]
    assert {r.status for r in runs} <= {RunStatus.SUCCEEDED, RunStatus.QUEUED}
    spans = []
    for run in done:
        stage = store.get_run(run.id).stage("work")
        assert stage.output_summary and run.interval_end.isoformat() in stage.output_summary
        assert stage.started_at is not None and stage.finished_at is not None
        spans.append((stage.started_at.timestamp(), stage.finished_at.timestamp()))
    assert _overlaps(spans) == 1, "two runs of a max_active_runs=1 deployment at once"
    logs = Path(os.environ["AIRFLOWLESS_HOME"]) / "service" / "logs"
    driver_log = (logs / f"run-{done[0].id}.log").read_text()
    assert f"driver of run {done[0].id}" in driver_log and "work: succeeded" in driver_log
    warm = [r for r in done if "(warm: started before the run)" in (logs / f"run-{r.id}.log").read_text()]
    assert warm, "runs after the first of a service take the warm driver it keeps"

    # the driver's log is copied beside its stages' logs: `runs logs` on another machine (another home, the
    # same record) shows it from there
    copy = store.get_run(done[0].id).driver_log_uri
    home = Path(os.environ["AIRFLOWLESS_HOME"])
    assert copy == str(home / "storage" / "runs" / str(done[0].id) / "logs" / "driver.log")
    assert Path(copy).read_bytes() == driver_log.encode() + END_MARK  # whole, and closed by the service
    assert oct(Path(copy).stat().st_mode & 0o777) == "0o600"
    elsewhere = subprocess.run([sys.executable, "-m", "airflowless.cli", "runs", "logs", str(done[0].id), "--follow"],
                               capture_output=True, text=True, timeout=30,  # closed: --follow ends at once
                               env={**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "another-machine")})
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert f"== driver (started by the service; {copy}) ==" in elsewhere.stdout, elsewhere.stdout
    assert "work: succeeded" in elsewhere.stdout and "the log is whole" not in elsewhere.stdout, elsewhere.stdout
    store.close()


def _warm_drivers(db: str) -> list[Any]:
    """The warm drivers (waiting for a run) of the services on record ``db``."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        if "--wait" in (process.info["cmdline"] or []) and "airflowless.service.driver" in process.info["cmdline"]:
            try:
                if process.environ().get("AIRFLOWLESS_DB") == db and _alive(process):
                    found.append(process)
            except psutil.Error:
                continue
    return found


def _alive(process: Any) -> bool:
    """Running, and not a zombie (an orphan's new parent may not reap it at once)."""
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))


@pytest.mark.usefixtures("home")
def test_runs_waiting_in_a_full_pool_say_why_and_queued_or_running_runs_are_cancelled_from_the_cli(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "ticking.py"
    module.write_text(_MODULE)
    store = open_store(db)
    store.set_pool("closed", 0)
    waiting = submit(str(module), pool="closed", store=store)
    long = submit(str(module), params={"seconds": 120.0}, store=store)
    service = _service(db, cluster_client.scheduler.address, tmp_path / "service.log")
    try:
        eventually(lambda: store.get_run(long).stages and store.get_run(long).stage("work").status == "running",
                   timeout=60, message=lambda: (tmp_path / "service.log").read_text()[-2000:])
        shown = _cli("runs", "show", str(waiting))
        assert "queued: pool 'closed' is full (0 of 0 slots taken)" in shown.stdout, shown.stdout + shown.stderr
        cancelled = _cli("runs", "cancel", str(waiting))
        assert cancelled.returncode == 0 and "cancelled (it was queued)" in cancelled.stdout
        assert store.get_run(waiting).status == RunStatus.CANCELLED

        asked = _cli("runs", "cancel", str(long))
        assert asked.returncode == 0, asked.stderr
        followed = _cli("runs", "logs", str(long), "--follow")  # returns once the run has ended
        assert store.get_run(long).status == RunStatus.CANCELLED
        assert store.get_run(long).stage("work").status == "cancelled"
        assert f"driver of run {long}" in followed.stdout and "work: started" in followed.stdout
        again = _cli("runs", "cancel", str(long))
        assert again.returncode == 1 and "has already ended (cancelled)" in again.stderr
    finally:
        stop(service)
    store.close()


_CHAIN = '''
from airflowless import pipeline, stage

@stage
def step(name: str, upstream_run_id: int) -> str:
    return f"{name} after run {upstream_run_id}"

@pipeline
def {name}(upstream_run_id: int = 0):
    return step("{name}", upstream_run_id)
'''


@pytest.mark.usefixtures("home")
def test_a_chain_of_three_deployments_runs_in_order_each_once(cluster_client: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    store = open_store(db)
    for name, after in (("extract", None), ("features", ["extract"]), ("train", ["features:succeeded"])):
        module = tmp_path / f"{name}.py"
        module.write_text(_CHAIN.replace("{name}", name))
        deploy(str(module), name, after=after, store=store)
    first = trigger("extract", store=store)
    service = _service(db, cluster_client.scheduler.address, tmp_path / "service.log")
    try:
        def ended() -> list[Any]:
            return [r for r in store.list_runs(limit=20) if r.pipeline == "train" and r.status == RunStatus.SUCCEEDED]

        eventually(ended, timeout=90, message=lambda: (tmp_path / "service.log").read_text()[-3000:])
    finally:
        stop(service)
    runs = {r.pipeline: store.get_run(r.id) for r in store.list_runs(limit=20)}
    assert sorted(runs) == ["extract", "features", "train"] and len(store.list_runs(limit=20)) == 3  # each once
    assert runs["features"].upstream_run == first and runs["train"].upstream_run == runs["features"].id
    assert runs["train"].stage("step").output_summary == f"str: 'train after run {runs['features'].id}'"
    starts = [runs[name].stage("step").started_at for name in ("extract", "features", "train")]
    ends = [runs[name].stage("step").finished_at for name in ("extract", "features", "train")]
    assert ends[0] <= starts[1] and ends[1] <= starts[2]  # in order
    store.close()
