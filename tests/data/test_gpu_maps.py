"""``map_batches(num_gpus=...)`` on real clusters: its tasks run only where a GPU is declared.

No GPU is needed: a worker that declares ``GPU=1`` gets the tasks, whatever it
really has (the GPU suite, tests/gpu, checks the device itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflowless import data
from airflowless.data.execution.executor import ResourceError
from tests.support.scripts import run_script


def _tag(batch: dict[str, Any]) -> dict[str, Any]:
    batch["tag"] = batch["id"] * 0
    return batch


def test_a_gpu_map_on_a_cluster_without_gpus_is_a_clear_error(cluster_client: object) -> None:
    with pytest.raises(ResourceError, match=r"asks each task for \{'GPU': 1.0\} .* no worker of the cluster offers"):
        data.range(10, parallelism=2).map_batches(_tag, num_gpus=1).take_all()


PLACEMENT = '''
import json
import os

from distributed import Nanny, Scheduler, SpecCluster

import airflowless
from airflowless import data


def where(batch):
    batch["pid"] = [os.getpid()] * len(batch["id"])
    return batch


def where_gpu(batch):
    batch["gpu_pid"] = [os.getpid()] * len(batch["id"])
    return batch


if __name__ == "__main__":
    workers = {
        "gpu": {"cls": Nanny, "options": {"nthreads": 1, "resources": {"CPU": 1, "GPU": 1}}},
        "cpu": {"cls": Nanny, "options": {"nthreads": 1, "resources": {"CPU": 1}}},
    }
    with SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}}) as cluster:
        client = airflowless.init(cluster=cluster, quiet=True)
        pids = client.run(os.getpid)
        gpu_pid = next(pid for address, pid in pids.items() if client.scheduler_info()["workers"][address]["resources"].get("GPU"))
        rows = data.range(64, parallelism=8).map_batches(where).map_batches(where_gpu, num_gpus=1).take_all()
        airflowless.shutdown()
    print("RESULT " + json.dumps({"gpu_pid": gpu_pid, "gpu_pids": sorted({r["gpu_pid"] for r in rows}), "rows": len(rows)}))
'''


def test_gpu_map_tasks_run_on_the_gpu_worker_only(tmp_path: Path) -> None:
    found = run_script(tmp_path, "placement.py", PLACEMENT, timeout=180)
    assert found["rows"] == 64
    assert found["gpu_pids"] == [found["gpu_pid"]]
