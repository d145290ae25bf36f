"""The taxi pipeline on Slurm: dask-jobqueue's SLURMCluster, workers as Slurm jobs, adaptive scaling.

A driver process makes a ``SLURMCluster`` (one 1-core worker per job) on the
test Slurm cluster of ``conftest.py``, connects with
``airflowless.init(cluster=...)``, makes it adaptive between 0 and as many
workers as the node has cores, and runs ``pipelines/taxi.py`` with small
parameters (its Tuner's trials are 2-rank XGBoost Trainers; its deployment
serves the model). This process meanwhile counts the jobs in ``squeue``: none
at first, jobs while the pipeline runs, none again once it is idle. Run with
``-s`` to see the job count over time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import require_module

from .conftest import Slurm

_DRIVER = """
import json, subprocess, sys, time
from dask_jobqueue import SLURMCluster
import airflowless
from airflowless.runtime.adaptive import adapt
from pipelines.taxi import taxi

tmp, maximum = sys.argv[1], int(sys.argv[2])
cluster = SLURMCluster(
    cores=1, processes=1, memory="1500MB", walltime="00:10:00", python=sys.executable,
    local_directory=f"{tmp}/worker", log_directory=f"{tmp}/jobs", queue="debug",
    scheduler_options={"host": "127.0.0.1", "dashboard_address": ":0"},
    worker_extra_args=["--host", "127.0.0.1"])
airflowless.init(cluster=cluster, quiet=True)
adapt(cluster, minimum=0, maximum=maximum, interval="500ms", wait_count=4)
started = time.monotonic()
result = taxi.run({"path": f"{tmp}/taxi", "n_rows": 4000, "n_files": 2, "num_workers": 2,
                   "num_boost_round": 5, "num_samples": 2})
took = time.monotonic() - started
print("RESULT " + json.dumps({"status": result.record.status, "took": took,
                              "trials": result.value["model"]["trials"],
                              "served": result.value["served"]["predictions"]}), flush=True)
airflowless.shutdown()  # the driver is done: its client lets go of the run's results; the cluster stays
deadline = time.monotonic() + 60
while len(cluster.scheduler_info["workers"]) > 1 and time.monotonic() < deadline:
    time.sleep(0.5)
idle = time.monotonic() - started - took
jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout.split()
while len(jobs) > len(cluster.scheduler_info["workers"]) and time.monotonic() < deadline + 10:  # a job ends
    # shortly after its worker
    time.sleep(0.5)
    jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout.split()
print("IDLE " + json.dumps({"workers": len(cluster.scheduler_info["workers"]), "after": idle, "jobs": jobs}),
      flush=True)
cluster.close()
"""


def _changes(samples: list[tuple[float, int]]) -> str:
    out, last = [], None
    for at, count in samples:
        if count != last:
            out.append(f"{at:.1f}s:{count}")
            last = count
    return " ".join(out)


@pytest.mark.timeout(240)
def test_the_taxi_pipeline_runs_on_slurm_jobs_that_come_and_go(slurm: Slurm, tmp_path: Path) -> None:
    require_module("dask_jobqueue")
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    repo = Path(__file__).parents[2]
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(repo),
           "SLURM_CONF": str(slurm.conf)}
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    started = time.monotonic()

    def count_jobs() -> None:
        while not stop.is_set():
            samples.append((time.monotonic() - started, len(slurm.squeue_jobs())))
            time.sleep(0.5)

    sampler = threading.Thread(target=count_jobs, daemon=True)
    sampler.start()
    try:
        done = subprocess.run([sys.executable, str(script), str(tmp_path), str(slurm.cpus)], capture_output=True,
                              text=True, timeout=220, env=env, cwd=repo)
    finally:
        stop.set()
        sampler.join()
    print(f"\nsqueue job count over time: {_changes(samples)}")
    found = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
             for line in done.stdout.splitlines() if line.startswith(("RESULT ", "IDLE "))}
    assert done.returncode == 0 and "RESULT" in found, f"{done.stderr[-4000:]}\n{slurm.logs()}"
    print(f"taxi on Slurm: {found['RESULT']['took']:.1f} s; idle after {found.get('IDLE', {}).get('after', -1):.1f} s")
    assert found["RESULT"]["status"] == "succeeded"
    assert found["RESULT"]["trials"] == 2 and len(found["RESULT"]["served"]) == 2
    counts = [count for _, count in samples]
    assert counts[0] == 0, "jobs were queued before the pipeline asked for any"
    assert max(counts) == slurm.cpus, f"expected {slurm.cpus} worker jobs at the peak, saw {_changes(samples)}"
    peak = counts.index(max(counts))
    assert min(counts[peak:]) < max(counts), f"no job was cancelled after the peak: {_changes(samples)}"
    # Idle workers' jobs are cancelled. One worker may stay: Dask's adaptive scaling never retires the
    # last worker holding data a client references, and the Tuner's stage keeps its prepared blocks
    # in its worker's client (airflowless/train/prepared.py) after the run.
    assert found["IDLE"]["workers"] <= 1 and len(found["IDLE"]["jobs"]) == found["IDLE"]["workers"], (
        f"idle workers' jobs were not cancelled: {found['IDLE']}\n{done.stderr[-3000:]}")
