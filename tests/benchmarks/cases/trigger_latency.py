"""Trigger case: a new partition's completion to its run's first stage running (issue 27).

(a) local: the service (a process of its own) watches ``date=*/`` in a folder with the default settings
(filesystem events, quiet for 0.5 s); TRIGGER_PARTITIONS partitions land one after another, two files each,
the second 0.2 s after the first. (b) S3: the same on a bucket of moto's S3 server, polled every
TRIGGER_POLL seconds (default 2). (c) the baseline users write without the service: a loop that lists the
folder every second and starts ``airflowless run`` for each new partition. Latency is the first stage's
recorded start minus the moment the partition's last file was written. All join the same 2-worker cluster.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import airflowless
from airflowless.service.deploy import deploy
from airflowless.service.files import FileSpec
from airflowless.store import open_store

PARTITIONS = int(os.environ.get("TRIGGER_PARTITIONS", "15"))
POLL = float(os.environ.get("TRIGGER_POLL", "2"))
STATE: dict = {}

MODULE = '''
from airflowless import pipeline, stage

@stage(cache=False)
def first(day: str) -> str:
    return day

@pipeline
def landed(day: str):
    return first(day)
'''


def setup() -> None:
    client = airflowless.init(n_workers=2, threads_per_worker=1, dashboard_address=":0", quiet=True)
    folder = Path(tempfile.mkdtemp(prefix="trigger-latency-"))
    (folder / "landed.py").write_text(MODULE)
    STATE.update(client=client, folder=folder, address=client.scheduler.address)


def _service(db: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "airflowless.cli", "service", "start", "--db", db, "--address",
                             STATE["address"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "AIRFLOWLESS_DB": db, **(env or {})})


def _latencies(store, landed: dict[str, float]) -> list[float]:
    found = []
    for run in store.list_runs(limit=500):
        day = run.params.get("day")
        stage = store.get_run(run.id).stage("first") if day in landed else None
        if stage is not None and stage.started_at is not None:
            found.append(stage.started_at.timestamp() - landed[day])
    return found


def _wait_runs(store, n: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if sum(r.status == "succeeded" for r in store.list_runs(limit=500)) >= n:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{n} runs did not succeed within {timeout} s")


def _land(write, n: int, store) -> dict[str, float]:
    """Land ``n`` partitions one at a time, each once the previous one's run succeeded; when each was whole."""
    landed = {}
    for i in range(n):
        day = f"2024-01-{i + 1:02d}"
        write(day, "part-0.csv")
        time.sleep(0.2)
        write(day, "part-1.csv")
        landed[day] = time.time()
        _wait_runs(store, i + 1)
        time.sleep(0.3)
    return landed


def _local() -> list[float]:
    root = STATE["folder"] / "local"
    root.mkdir()
    db = f"sqlite:///{STATE['folder'] / 'local.db'}"
    store = open_store(db)
    deploy(str(STATE["folder"] / "landed.py"), "local", on_new_files=FileSpec.parse(f"{root}/date=*/",
                                                                                    params={"day": "date"}),
           store=store)
    service = _service(db)

    def write(day: str, name: str) -> None:
        (root / f"date={day}").mkdir(exist_ok=True)
        (root / f"date={day}" / name).write_text("x")

    try:
        time.sleep(3)  # started and watching
        landed = _land(write, PARTITIONS, store)
    finally:
        service.terminate()
        service.wait(30)
    return _latencies(store, landed)


def _s3() -> list[float]:
    import socket

    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": endpoint}
    os.environ.update(env)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        client = boto3.client("s3")
        client.create_bucket(Bucket="landing")
        client.put_object(Bucket="landing", Key="taxi/README", Body=b"x")
        db = f"sqlite:///{STATE['folder'] / 's3.db'}"
        store = open_store(db)
        deploy(str(STATE["folder"] / "landed.py"), "s3", on_new_files=FileSpec.parse(
            "s3://landing/taxi/date=*/", params={"day": "date"}, poll_s=POLL), store=store)
        service = _service(db, env)
        try:
            time.sleep(3)
            landed = _land(lambda day, name: client.put_object(Bucket="landing", Key=f"taxi/date={day}/{name}",
                                                               Body=b"x"), PARTITIONS, store)
        finally:
            service.terminate()
            service.wait(30)
        return _latencies(store, landed)
    finally:
        server.terminate()
        server.wait(30)


_LOOP = """
import os, subprocess, sys, time
root, target, address, db = sys.argv[1:5]
seen = set(os.listdir(root))
while True:
    for name in sorted(set(os.listdir(root)) - seen):
        seen.add(name)
        subprocess.Popen([sys.executable, "-m", "airflowless.cli", "run", target, "--address", address, "--db", db,
                          "-p", "day=" + name.partition("=")[2]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
"""


def _loop() -> list[float]:
    root = STATE["folder"] / "loop"
    root.mkdir()
    db = f"sqlite:///{STATE['folder'] / 'loop.db'}"
    store = open_store(db)
    script = STATE["folder"] / "loop.py"
    script.write_text(_LOOP)
    loop = subprocess.Popen([sys.executable, str(script), str(root), str(STATE["folder"] / "landed.py"),
                             STATE["address"], db])

    def write(day: str, name: str) -> None:
        (root / f"date={day}").mkdir(exist_ok=True)
        (root / f"date={day}" / name).write_text("x")

    try:
        time.sleep(1)
        landed = _land(write, PARTITIONS, store)
    finally:
        loop.terminate()
        loop.wait(30)
    return _latencies(store, landed)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run() -> dict:
    figures: dict = {"partitions": PARTITIONS, "poll": POLL}
    for name, measure in (("local", _local), ("s3", _s3), ("loop", _loop)):
        values = measure()
        figures[f"{name} p50"] = statistics.median(values)
        figures[f"{name} max"] = max(values)
        figures[f"{name} p90"] = _p(values, 0.9)
        figures[f"{name} n"] = len(values)
    return figures


def teardown() -> None:
    airflowless.shutdown()
