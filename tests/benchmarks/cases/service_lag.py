"""Service case: schedule lag (a run's due time to its first stage running) and the idle service's CPU.

(a) the service (a process of its own, ticking every 0.25 s) runs a deployment due every second for
SERVICE_TICKS ticks; (b) the baseline is what users do without it: cron starting ``airflowless run`` at each
tick (a process per tick, not waited for); (c, SERVICE_IDLE=1) 1,000 deployments on 1-minute schedules whose
runs wait in a pool of 0 slots: the service's CPU over 65 s (one minute boundary: 1,000 runs queued).
Lag is the first stage's recorded start minus the tick. Both join the same 2-worker cluster.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import airflowless
from airflowless.service.deploy import deploy
from airflowless.store import open_store

TICKS = int(os.environ.get("SERVICE_TICKS", "30"))
STATE: dict = {}

MODULE = '''
from airflowless import pipeline, stage

@stage(cache=False)
def first(interval_end: str) -> str:
    return interval_end

@pipeline
def lagging(interval_start: str = "", interval_end: str = ""):
    return first(interval_end)
'''


def setup() -> None:
    client = airflowless.init(n_workers=2, threads_per_worker=1, dashboard_address=":0", quiet=True)
    folder = Path(tempfile.mkdtemp(prefix="service-lag-"))
    (folder / "lagging.py").write_text(MODULE)
    STATE.update(client=client, folder=folder, address=client.scheduler.address)


def _service(db: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "airflowless.cli", "service", "start", "--db", db, "--address",
                             STATE["address"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "AIRFLOWLESS_DB": db})


def _lags(store, runs) -> list[float]:
    lags = []
    for run in runs:
        stage = store.get_run(run.id).stage("first")
        due = datetime.fromisoformat(run.params["interval_end"]) if run.interval_end is None else run.interval_end
        lags.append((stage.started_at - due).total_seconds())
    return lags


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _service_lag() -> list[float]:
    db = f"sqlite:///{STATE['folder'] / 'service.db'}"
    store = open_store(db)
    deploy(str(STATE["folder"] / "lagging.py"), "every-second", every=1, store=store)
    service = _service(db)
    try:
        deadline = time.time() + TICKS + 60
        while time.time() < deadline:
            done = [r for r in store.list_runs(limit=TICKS + 20) if r.status == "succeeded"]
            if len(done) >= TICKS + 2:
                break
            time.sleep(0.5)
    finally:
        service.terminate()
        service.wait(30)
    runs = sorted((r for r in store.list_runs(limit=500) if r.status == "succeeded"), key=lambda r: r.id)
    return _lags(store, runs[2:TICKS + 2])  # the first two: the service's own start


def _cron_lag() -> list[float]:
    db = f"sqlite:///{STATE['folder'] / 'cron.db'}"
    store = open_store(db)
    started = []
    for _ in range(max(5, TICKS // 3)):
        tick = (int(time.time()) + 2) // 2 * 2 + 2  # every 2 s: one driver process at a time on 2 cores
        time.sleep(max(0.0, tick - time.time()))
        due = datetime.fromtimestamp(tick, timezone.utc)
        started.append(subprocess.Popen(
            [sys.executable, "-m", "airflowless.cli", "run", str(STATE["folder"] / "lagging.py"), "--address",
             STATE["address"], "--db", db, "-p", f"interval_end={due.isoformat()}",
             "-p", f"interval_start={(due - timedelta(seconds=2)).isoformat()}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for process in started:
        process.wait(120)
    runs = [r for r in store.list_runs(limit=500) if r.status == "succeeded"]
    return _lags(store, runs)


def _idle_cpu() -> float:
    import psutil

    db = f"sqlite:///{STATE['folder'] / 'idle.db'}"
    store = open_store(db)
    store.set_pool("closed", 0)
    for i in range(1000):
        store.create_pipeline_deployment(f"d{i}", pipeline="lagging", target=str(STATE["folder"] / "lagging.py"),
                                         params={}, schedule=_minutely(), pool="closed")
    service = _service(db)
    try:
        time.sleep(3)  # started
        process = psutil.Process(service.pid)
        before, began = process.cpu_times(), time.monotonic()
        time.sleep(65)
        after, took = process.cpu_times(), time.monotonic() - began
    finally:
        service.terminate()
        service.wait(30)
    queued = len(store.queued_runs())
    STATE["idle_queued"] = queued
    return ((after.user + after.system) - (before.user + before.system)) / took


def _minutely():
    from airflowless.service.schedules import Schedule

    return Schedule.parse(cron="* * * * *")


def run() -> dict:
    service = _service_lag()
    cron = _cron_lag()
    figures = {"service p50": statistics.median(service), "service p99": _p(service, 0.99),
               "service max": max(service), "cron p50": statistics.median(cron), "cron p99": _p(cron, 0.99),
               "ticks": len(service)}
    if os.environ.get("SERVICE_IDLE") == "1":
        figures["idle cpu share"] = _idle_cpu()
        figures["idle queued"] = STATE["idle_queued"]
    return figures


def teardown() -> None:
    airflowless.shutdown()
