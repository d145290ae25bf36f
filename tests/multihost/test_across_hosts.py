"""Data, Train, Tune and Serve with the scheduler, two workers and the driver on hosts of their own.

The hosts are network namespaces on one private bridge (see ``conftest.py``);
each program runs on the driver host and reaches the others only through the
network, as on a real cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from .conftest import PROGRAMS, REPO, Hosts, _result

WILDCARDS = {"0.0.0.0", "::"}


def _ranks(hosts: Hosts, name: str) -> list[dict[str, Any]]:
    files = sorted((hosts.folder / "out").glob(f"{name}-rank*.json"))
    return [json.loads(f.read_text()) for f in files]


@pytest.fixture(scope="module")
def single_host(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The trainers' results on a two-worker cluster on one host (this machine's loopback)."""
    folder = tmp_path_factory.mktemp("single-host")
    from .conftest import _environ

    done = subprocess.run([sys.executable, str(PROGRAMS), "trainers", "embedded", str(folder)], cwd=REPO,
                          capture_output=True, text=True, timeout=240, env=_environ(folder, "single"))
    return _result(done.stdout + done.stderr)


@pytest.mark.timeout(300)
def test_xgboost_lightgbm_and_torch_ranks_on_two_hosts(healthy: Hosts, single_host: dict[str, Any]) -> None:
    result = healthy.drive("trainers")
    assert {name: r["error"] for name, r in result.items()} == {"xgboost": None, "lightgbm": None, "torch": None}
    worker_ips = {healthy.network.address(h) for h in ("w1", "w2")}
    for name in ("xgboost", "lightgbm", "torch"):
        ranks = _ranks(healthy, name)
        assert len(ranks) == 2, name
        assert {r["ip"] for r in ranks} == worker_ips, f"{name}: the two ranks ran on {ranks}"
        for rank in ranks:
            # everything a rank listens on is its own host's address; XGBoost's and LightGBM's
            # C++ listeners bind every interface (see tests/train/test_exposure.py), nothing else may
            allowed = {rank["ip"]} | (WILDCARDS if name in {"xgboost", "lightgbm"} else set())
            listening = {address.split()[0] for address in rank["listening"]}
            assert listening <= allowed, f"{name}: {rank}"
        # the single-host run is the reference: the same numbers, to rounding
        assert result[name]["metrics"], name
        for metric, value in result[name]["metrics"].items():
            assert value == pytest.approx(single_host[name]["metrics"][metric], rel=1e-5, abs=1e-6), (name, metric)
    machines = {m.rsplit(":", 1)[0] for m in _ranks(healthy, "lightgbm")[0]["machines"].split(",")}
    assert machines == worker_ips  # LightGBM's machine list names the hosts, not loopback
    assert {r["backend"] for r in _ranks(healthy, "torch")} == {"gloo"}


@pytest.mark.timeout(200)
def test_a_dataset_made_on_one_host_is_consumed_on_another(healthy: Hosts) -> None:
    result = healthy.drive("dataset")
    assert result["error"] is None
    ranks = _ranks(healthy, "dataset")
    assert len(ranks) == 2 and len({r["ip"] for r in ranks}) == 2, ranks
    assert sum(r["rows"] for r in ranks) == 4_000
    assert sum(r["total"] for r in ranks) == sum(range(4_000))
    crossed = {r["ip"]: {ip: n for ip, n in r["made_on"].items() if ip != r["ip"]} for r in ranks}
    assert any(crossed.values()), f"every rank only read blocks made on its own host: {ranks}"


@pytest.mark.timeout(300)
def test_the_taxi_pipeline_with_a_tuner_and_a_deployment(healthy: Hosts) -> None:
    """``airflowless run pipelines/taxi.py`` from the driver host: Data, a Tuner of 2-rank trainers, Serve."""
    import sqlite3

    output = healthy.run_cli("run", str(REPO / "pipelines" / "taxi.py"), "--address", healthy.address,
                             "-p", f"path={healthy.folder / 'taxi-data'}", "-p", "n_rows=20000",
                             "-p", "num_boost_round=5", "-p", "num_samples=2")
    with sqlite3.connect(healthy.folder / "airflowless.db") as db:
        runs = db.execute("select id, status, error from pipeline_runs").fetchall()
        assert [status for _, status, _ in runs][-1:] == ["succeeded"], (runs, output[-4000:])
        stages = db.execute("select stage, status, worker from stage_runs where run_id = ?", (runs[-1][0],)).fetchall()
        trials = db.execute("select t.status from trials t join experiments e on e.id = t.experiment_id "
                            "where e.name like 'taxi-tune-%'").fetchall()
    assert {stage for stage, _, _ in stages} >= {"generate", "load", "split", "fit", "explore", "deploy"}
    assert {status for _, status, _ in stages} <= {"succeeded", "reused"}, stages
    worker_ips = {healthy.network.address(h) for h in ("w1", "w2")}
    ran_on = {str(worker).split("://")[-1].rsplit(":", 1)[0] for _, _, worker in stages if worker}
    assert ran_on and ran_on <= worker_ips, stages  # stages run on the worker hosts, by their addresses
    assert [status for (status,) in trials] == ["terminated", "terminated"]


@pytest.mark.timeout(200)
def test_a_replica_on_a_worker_host_answers_the_ingress_on_the_driver_host(healthy: Hosts) -> None:
    result = healthy.drive("serve")
    assert result["url"].startswith("http://127.0.0.1:")  # the ingress: on the driver host, its own loopback
    assert result["first"]["got"] == {"n": 1}
    assert result["first"]["ip"] in {healthy.network.address(h) for h in ("w1", "w2")}
