"""A real `dask scheduler` and two `dask worker` processes: run on them, and lose a worker mid-run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from distributed import Client

from airflowless import pipeline, stage
from airflowless.runtime.processes import kill_worker
from airflowless.store.records import StageStatus
from tests.support.eventually import eventually
from tests.support.process_cluster import process_cluster_fixture

cluster = process_cluster_fixture(n_workers=2, resources={"CPU": 1})


def _bump(counter: Path) -> int:
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    return count


@stage
def prepare(counter: str) -> int:
    _bump(Path(counter))
    return 21


@stage(resources={"CPU": 1})
def long_step(value: int, counter: str, seconds: float) -> int:
    if _bump(Path(counter)) == 1:  # the first attempt runs long enough to lose its worker; the rerun need not
        time.sleep(seconds)
    return value * 2


@stage
def combine(doubled: int, original: int) -> dict[str, int]:
    return {"doubled": doubled, "original": original}


@pipeline
def survivor(workdir: str, seconds: float = 6.0):
    base = prepare(f"{workdir}/prepare")
    return combine(long_step(base, f"{workdir}/long", seconds), base)


def test_init_connects_by_address_and_env(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    code = ("import airflowless\n"
            "c = airflowless.init(quiet=True)\n"
            "print(len(c.scheduler_info(n_workers=-1)['workers']), "
            "sorted(set(c.run(lambda dask_worker: 'airflowless' in dask_worker.plugins).values())))\n"
            "airflowless.shutdown()\n")
    env = {**os.environ, "AIRFLOWLESS_ADDRESS": cluster.address, "AIRFLOWLESS_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.strip() == "2 [True]", out.stderr


def test_run_survives_a_killed_worker(cluster, store, tmp_path: Path) -> None:  # noqa: ANN001
    client = Client(cluster.address, timeout=10)
    try:
        names = {addr: w["name"] for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        outcome: dict[str, object] = {}

        def drive() -> None:
            try:
                outcome["result"] = survivor.run({"workdir": str(tmp_path), "seconds": 6.0},
                                                 client=client, store=store)
            except BaseException as exc:  # reported by the assertions below
                outcome["error"] = exc

        driver = threading.Thread(target=drive)
        driver.start()
        def long_step_running():  # noqa: ANN202
            runs = store.list_runs(limit=1)
            stages = {s.node: s for s in store.get_run(runs[0].id).stages} if runs else {}
            record = stages.get("long_step")  # the run's stages are recorded just after the run itself
            return record if record is not None and record.status == StageStatus.RUNNING and record.worker else None

        running = eventually(long_step_running, message="long_step to start")
        index = int(str(names[running.worker]).rsplit("-", 1)[1])
        kill_worker(cluster, index)
        driver.join(timeout=90)
        assert not driver.is_alive(), "the run did not finish after losing a worker"
        assert "error" not in outcome, outcome.get("error")
        result = outcome["result"]
        assert result.value == {"doubled": 42, "original": 21}  # type: ignore[attr-defined]

        record = store.get_run(result.run_id)  # type: ignore[attr-defined]
        assert record.status == "succeeded"
        assert [s.node for s in record.stages] == ["prepare", "long_step", "combine"], "one row per stage"
        assert all(s.status == "succeeded" for s in record.stages)
        long = record.stage("long_step")
        assert long.attempts == 2, "the stage ran again on the surviving worker"
        assert long.worker != running.worker
        assert (tmp_path / "long").read_text() == "2"
        assert (tmp_path / "prepare").read_text() == "1", "a finished stage is reloaded, not rerun"
        assert store.count_runs() == 1
    finally:
        client.close()
