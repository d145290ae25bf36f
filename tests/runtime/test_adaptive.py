"""Adaptive scaling for what airflowless waits for: the arithmetic alone, then a real LocalCluster.

The cluster test starts a LocalCluster of worker processes with one worker,
makes it adaptive between 1 and 3 workers, and fits a Trainer of 3 ranks (one
per distinct worker): Dask's own heuristics see no task at all while the group
waits to be placed, so only the demand the group declares can add the workers.
The worker count over time is printed (run with -s to see it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflowless.runtime.adaptive import Demand, backlog, workers_to_add


def test_distinct_ranks_need_one_worker_each() -> None:
    assert workers_to_add([{"CPU": 1.0}], [Demand({"CPU": 1.0}, 3, distinct=True)], {"CPU": 1.0}) == 2
    # packed units share a new worker; distinct ones do not
    assert workers_to_add([], [Demand({"CPU": 1.0}, 4)], {"CPU": 2.0}) == 2
    assert workers_to_add([], [Demand({"CPU": 1.0}, 4, distinct=True)], {"CPU": 2.0}) == 4


def test_demand_no_new_worker_could_host_adds_nothing() -> None:
    assert workers_to_add([{"CPU": 4.0}], [Demand({"GPU": 1.0}, 2)], {"CPU": 4.0}) == 0


def test_free_room_is_used_before_new_workers() -> None:
    assert workers_to_add([{"CPU": 2.0}, {"CPU": 0.0}], [Demand({"CPU": 1.0}, 3)], {"CPU": 1.0}) == 1


def test_backlog_counts_tasks_beyond_a_workers_resources() -> None:
    free, waiting = backlog([({"CPU": 1.0}, [{"CPU": 1.0}] * 3), ({"CPU": 2.0}, [])], [{"GPU": 1.0}])
    assert free == [{"CPU": 0.0}, {"CPU": 2.0}]
    assert sorted(str(d.resources) for d in waiting) == ["{'CPU': 1.0}", "{'CPU': 1.0}", "{'GPU': 1.0}"]
    # the two waiting CPU tasks fit on the idle worker: nothing to add for them
    assert workers_to_add(free, [d for d in waiting if "CPU" in d.resources], {"CPU": 1.0}) == 0


# Its own cluster, so in its own process: the session's embedded cluster stays as it is.
_SCRIPT = """
import json, sys, threading, time

def loop():
    from airflowless import train
    for step in range(3):
        train.report({"step": step})
        time.sleep(0.5)

def main():
    from distributed import LocalCluster
    import airflowless
    from airflowless.runtime.adaptive import adapt
    from airflowless.train import DataParallelTrainer, RunConfig, ScalingConfig

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=":0", memory_limit="1GiB")
    client = airflowless.init(cluster=cluster, quiet=True)
    declared = [w["resources"] for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    adapt(cluster, minimum=1, maximum=3, interval="250ms", wait_count=4)
    samples, stop, started = [], threading.Event(), time.monotonic()

    def sample():
        while not stop.is_set():
            samples.append((round(time.monotonic() - started, 2), len(cluster.scheduler_info["workers"])))
            time.sleep(0.25)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    result = DataParallelTrainer(loop, scaling_config=ScalingConfig(num_workers=3),
                                 run_config=RunConfig(name="adaptive-grow", verbose=0)).fit()
    fitted = time.monotonic() - started
    grown = [w["resources"] for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    deadline = time.monotonic() + 30
    while len(cluster.scheduler_info["workers"]) > 1 and time.monotonic() < deadline:
        time.sleep(0.25)
    time.sleep(0.5)
    stop.set()
    thread.join()
    print("RESULT " + json.dumps({"error": None if result.error is None else str(result.error),
                                  "metrics": result.metrics, "declared": declared, "grown": grown,
                                  "fitted": fitted, "samples": samples}), flush=True)
    airflowless.shutdown()
    cluster.close()

if __name__ == "__main__":
    main()
"""


def _changes(samples: list[list[float]]) -> str:
    out, last = [], None
    for at, count in samples:
        if count != last:
            out.append(f"{at:.1f}s:{int(count)}")
            last = count
    return " ".join(out)


@pytest.mark.timeout(120)
def test_a_trainer_needing_more_workers_grows_the_cluster_which_then_shrinks(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "adaptive_fit.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=110, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    found = json.loads(lines[0].removeprefix("RESULT "))
    print(f"\nworkers over time (fit ended at {found['fitted']:.1f}s): {_changes(found['samples'])}")
    assert found["error"] is None and found["metrics"]["step"] == 2
    # LocalCluster's workers declare nothing: init(cluster=) gave each its thread and memory limit
    assert found["declared"] == [{"CPU": 1.0, "MEMORY": float(2**30)}]
    assert all(r.get("CPU") == 1.0 for r in found["grown"])
    counts = [count for _, count in found["samples"]]
    assert counts[0] == 1 and max(counts) == 3  # grown for the three ranks
    assert counts[-1] == 1  # and shrunk back to the minimum once idle


@pytest.mark.timeout(60)
def test_init_rejects_what_is_not_a_cluster(home: Any) -> None:
    import airflowless
    from airflowless.errors import ConfigError

    with pytest.raises(ConfigError, match="expects a distributed Cluster object"):  # checked first: whatever runs
        airflowless.init(cluster="tcp://127.0.0.1:8786", quiet=True)


@pytest.mark.timeout(60)
def test_the_preload_raises_the_schedulers_own_target_for_autoscalers_that_ask_it() -> None:
    """What the dask-kubernetes operator's DaskAutoscaler reads (RPC and ``/api/v1/adaptive_target``)."""
    import asyncio

    import dask
    from distributed import Client, Scheduler
    from tornado.httpclient import AsyncHTTPClient

    routes = [*dask.config.get("distributed.scheduler.http.routes"), "distributed.http.scheduler.api"]

    async def scenario() -> tuple[int, int, int, bool]:
        with dask.config.set({"distributed.scheduler.http.routes": routes, "distributed.adaptive.maximum": 4}):
            async with Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0",
                                 preload=["airflowless.runtime.adaptive"]) as scheduler, \
                    Client(scheduler.address, asynchronous=True) as client:
                idle = await client.scheduler.adaptive_target()
                await client.scheduler.airflowless_demand_put(key="gang", resources={"CPU": 1.0}, count=3,
                                                              distinct=True)
                by_rpc = await client.scheduler.adaptive_target()
                url = f"http://127.0.0.1:{scheduler.http_server.port}/api/v1/adaptive_target"
                by_http = json.loads((await AsyncHTTPClient().fetch(url)).body)["workers"]
                grows = await client.scheduler.airflowless_may_grow()
                return idle, by_rpc, by_http, grows

    idle, by_rpc, by_http, grows = asyncio.run(scenario())
    assert idle == 0  # nothing waits: Dask's own answer
    assert by_rpc == by_http == 3  # three ranks, one per new worker
    assert grows  # the autoscaler asked, and 0 workers < the configured maximum of 4
