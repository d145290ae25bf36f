"""Kill a worker while a dataset streams: every row arrives exactly once (lineage recompute)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from airflowless.runtime.processes import kill_worker
from tests.support.process_cluster import process_cluster_fixture

cluster = process_cluster_fixture(n_workers=2, resources={"CPU": 1})

DRIVER = """
import json, sys, time
import airflowless
from airflowless import data

def slow(batch):  # 48 blocks of 0.1 s on 2 workers: the stream is still going when the worker is killed
    time.sleep(0.1)
    return {"id": batch["id"], "double": batch["id"] * 2}

airflowless.init(sys.argv[1], quiet=True)
seen = []
ds = data.range(48_000, parallelism=48).map_batches(slow)
for i, batch in enumerate(ds.iter_batches(batch_size=1000)):
    seen.extend(int(x) for x in batch["id"])
    assert (batch["double"] == batch["id"] * 2).all()
    print(f"batch {i}", flush=True)
print("RESULT " + json.dumps(seen), flush=True)
airflowless.shutdown()
"""


def test_stream_survives_a_killed_worker(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, str(script), cluster.address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    killed = False
    result = None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith("batch 5") and not killed:
            kill_worker(cluster, 0)
            killed = True
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
        assert time.monotonic() < deadline, "the stream did not finish"
    proc.wait(timeout=60)
    assert killed, "the stream ended before the kill"
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert result is not None
    assert len(result) == 48_000, "no row missing, none twice"
    assert sorted(result) == list(range(48_000))
