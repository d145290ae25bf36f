"""tune.with_parameters / with_resources / get_dataframe(filter_metric=...) on the real embedded cluster."""

from __future__ import annotations

from typing import Any

import cloudpickle
import numpy as np
import pytest

from airflowless import tune
from airflowless.errors import ConfigError
from airflowless.train import ScalingConfig

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def uses_table(config: dict[str, Any], table: np.ndarray, offset: int) -> None:
    from distributed import get_worker

    worker = get_worker()
    tune.report({"total": float(table.sum()) * config["x"] + offset,
                 "cpu_free": worker.state.available_resources.get("CPU", 0.0),
                 "cpu_declared": worker.state.total_resources.get("CPU", 0.0)})


def test_with_parameters_scatters_once_and_each_trial_gets_the_objects() -> None:
    table = np.ones(200_000)  # 1.6 MB: the trials must not each carry it
    wrapped = tune.with_parameters(uses_table, table=table, offset=7)
    grid = tune.Tuner(wrapped, param_space={"x": tune.grid_search([1, 2, 3])},
                      tune_config=tune.TuneConfig(metric="total", mode="max")).fit()
    assert grid.errors == []
    assert sorted(r.metrics["total"] for r in grid) == [200_007.0, 400_007.0, 600_007.0]
    assert wrapped._futures is not None and set(wrapped._futures) == {"table", "offset"}
    assert len(cloudpickle.dumps(wrapped)) < 50_000  # once scattered, only the futures travel


def test_with_resources_is_what_the_trial_task_holds() -> None:
    wrapped = tune.with_resources(tune.with_parameters(uses_table, table=np.ones(3), offset=0), {"cpu": 0.25})
    assert wrapped.resources == {"CPU": 0.25}
    grid = tune.Tuner(wrapped, param_space={"x": 1}, tune_config=tune.TuneConfig(max_concurrent_trials=1)).fit()
    (result,) = list(grid)
    assert result.error is None
    assert result.metrics["cpu_free"] == pytest.approx(result.metrics["cpu_declared"] - 0.25)
    assert tune.with_resources(uses_table, ScalingConfig(resources_per_worker={"CPU": 2})).resources == {"CPU": 2.0}


def test_wrappers_refuse_what_they_cannot_run() -> None:
    with pytest.raises(ConfigError, match="dict like"):
        tune.with_resources(uses_table, lambda config: {"CPU": 1})
    with pytest.raises(ConfigError, match="function trainable"):
        tune.with_parameters(42)


def climbs_then_falls(config: dict[str, Any]) -> None:
    for step, score in enumerate([1.0, 5.0 + config["x"], 2.0]):
        tune.report({"score": score, "step_seen": step})


def test_get_dataframe_takes_each_trials_best_report() -> None:
    grid = tune.Tuner(climbs_then_falls, param_space={"x": tune.grid_search([0, 1])},
                      tune_config=tune.TuneConfig(metric="score", mode="max")).fit()
    last = grid.get_dataframe()
    best = grid.get_dataframe(filter_metric="score", filter_mode="max")
    lowest = grid.get_dataframe(filter_metric="score", filter_mode="min")
    assert len(last) == len(best) == 2
    assert list(last["score"]) == [2.0, 2.0]
    assert sorted(best["score"]) == [5.0, 6.0] and set(best["step_seen"]) == {1}
    assert list(lowest["score"]) == [1.0, 1.0]
    assert sorted(best["config/x"]) == [0, 1]
    with pytest.raises(ConfigError, match="together"):
        grid.get_dataframe(filter_metric="score")


def held(config: dict[str, Any]) -> None:
    from distributed import Event

    Event(config["gate"]).wait(60)
    tune.report({"x": config["x"]})


def test_a_trial_waiting_for_resources_is_recorded_pending_not_running(cluster_client: Any) -> None:
    import threading
    import uuid

    from distributed import Event

    from airflowless.store import open_store
    from airflowless.train import RunConfig
    from tests.support.eventually import eventually

    cpus = max(cluster_client.run(lambda dask_worker: dask_worker.state.total_resources.get("CPU", 0)).values())
    name, gate = f"waits-{uuid.uuid4().hex[:8]}", f"gate-{uuid.uuid4().hex[:8]}"
    tuner = tune.Tuner(tune.with_resources(held, {"CPU": cpus}),  # a worker each: two run, the third waits
                       param_space={"x": tune.grid_search([1, 2, 3]), "gate": gate}, run_config=RunConfig(name=name))
    thread = threading.Thread(target=tuner.fit, daemon=True)
    thread.start()
    store = open_store()
    try:
        experiment = eventually(lambda: store.find_experiment(name))
        eventually(lambda: sorted(t["status"] for t in store.list_trials(experiment["id"]))
                   == ["pending", "running", "running"], timeout=30)
    finally:
        Event(gate, client=cluster_client).set()
        thread.join(60)
    assert sorted(t["status"] for t in store.list_trials(experiment["id"])) == ["completed"] * 3
