"""Tests for airflowless.runtime.processes on real scheduler and worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed import Client

from airflowless.errors import ClusterError, ConfigError
from airflowless.runtime.processes import (
    ProcessCluster,
    default_state_path,
    is_alive,
    kill_worker,
    load_state,
    save_state,
    start_process_cluster,
    stop_process_cluster,
)
from tests.support.eventually import eventually


def _n_workers(client: Client) -> int:
    return len(client.scheduler_info(n_workers=-1)["workers"])


def test_a_cluster_runs_tasks_drops_a_killed_worker_and_stop_ends_every_process(tmp_path: Path) -> None:
    """One cluster for the whole life cycle: started, used, a worker killed, stopped (twice)."""
    started = time.monotonic()
    c = start_process_cluster(n_workers=2, resources={"CPU": 1}, log_dir=tmp_path)
    elapsed = time.monotonic() - started
    try:
        print(f"process cluster with 2 workers started in {elapsed:.1f} s")
        assert c.address.startswith("tcp://127.0.0.1:")
        assert c.dashboard_link.startswith("http://127.0.0.1:")
        assert len(c.worker_pids) == 2
        assert all(is_alive(pid) for pid in (c.scheduler_pid, *c.worker_pids))
        assert sorted(p.name for p in Path(c.log_dir).glob("*.log")) == [
            "scheduler.log",
            "worker-0.log",
            "worker-1.log",
        ]
        with Client(c.address, set_as_default=False) as client:
            workers = client.scheduler_info(n_workers=-1)["workers"].values()
            assert sorted(w["name"] for w in workers) == ["worker-0", "worker-1"]
            assert all(w["resources"] == {"CPU": 1.0} for w in workers)
            assert all(w["nthreads"] == 1 for w in workers)
            assert all(w["host"] == "127.0.0.1" for w in workers)
            future = client.submit(lambda x: x + 1, 41, resources={"CPU": 1}, pure=False)
            assert future.result(timeout=10) == 42

            assert _n_workers(client) == 2
            kill_worker(c, 0)
            assert not is_alive(c.worker_pids[0])
            eventually(lambda: _n_workers(client) == 1, message="the scheduler to drop the killed worker")
            # the killed worker stays dead: no nanny brings it back
            time.sleep(0.5)
            assert _n_workers(client) == 1
            assert client.submit(pow, 2, 5, resources={"CPU": 1}).result(timeout=10) == 32
    finally:
        stop_process_cluster(c)
    assert not any(is_alive(pid) for pid in (c.scheduler_pid, *c.worker_pids))
    stop_process_cluster(c)  # stopping twice is harmless


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_workers": 0},
        {"threads_per_worker": 0},
        {"n_workers": 1.5},
        {"resources": {"CPU": -1}},
        {"resources": {"C PU": 1}},
        {"scheduler_port": 70000},
        {"timeout": 0},
    ],
)
def test_bad_options_raise_config_error_before_starting_anything(
    kwargs: dict, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError):
        start_process_cluster(log_dir=tmp_path / "logs", **kwargs)
    assert not (tmp_path / "logs").exists()


def test_a_worker_that_cannot_start_raises_cluster_error_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="worker-0.log") as info:
        start_process_cluster(n_workers=1, memory_limit="lots", log_dir=tmp_path, timeout=20)
    assert "exited" in str(info.value)


def test_kill_worker_rejects_unknown_index(tmp_path: Path) -> None:
    # the index is checked before any process is signalled, so no cluster needs to run (and the pids,
    # above Linux's largest pid_max, are no process)
    cluster = ProcessCluster(address="tcp://127.0.0.1:1234", dashboard_link="http://127.0.0.1:1235/status",
                             scheduler_pid=4_194_310, worker_pids=(4_194_311, 4_194_312), log_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="worker index"):
        kill_worker(cluster, 2)


def test_state_round_trips_through_the_default_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOWLESS_HOME", str(tmp_path / "home"))
    state = ProcessCluster(
        address="tcp://127.0.0.1:1234",
        dashboard_link="http://127.0.0.1:1235/status",
        scheduler_pid=10,
        worker_pids=(11, 12),
        log_dir=str(tmp_path),
    )
    assert default_state_path() == tmp_path / "home" / "cluster.json"
    assert load_state() is None
    assert save_state(state) == default_state_path()
    assert load_state() == state
    assert load_state(default_state_path()) == state
    default_state_path().write_text("{not json")
    with pytest.raises(ClusterError, match="start the cluster again"):
        load_state()


def test_is_alive_tells_running_from_exited_processes() -> None:
    assert is_alive(os.getpid())
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not is_alive(proc.pid)
    assert not is_alive(0)
