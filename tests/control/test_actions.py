"""Control-plane actions take effect on a real embedded cluster: a run cancelled, a trial and an
experiment stopped, a deployment scaled — through the action functions and over HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflowless import pipeline, stage
from airflowless.control import actions, live
from airflowless.control.context import ControlContext
from airflowless.control.errors import BadRequest, Conflict, NotFound, Unavailable
from tests.control.conftest import call
from tests.support.eventually import eventually


@stage
def slow_first(workdir: str) -> int:
    Path(workdir, "started").write_text("started")
    while not Path(workdir, "go").exists():
        time.sleep(0.05)
    return 1


@stage
def then(value: int) -> int:
    return value + 1


@pipeline
def held(workdir: str):
    return then(slow_first(workdir))


@pytest.fixture
def control(cluster_client: Any, home: Path) -> ControlContext:
    """The control context ``airflowless.init`` installed on the embedded scheduler."""
    from airflowless.control import mount
    from airflowless.runtime import cluster

    scheduler = cluster._runtime.cluster.scheduler  # type: ignore[union-attr]
    ctx = mount.installed(scheduler)
    assert ctx is not None, "airflowless.init() did not install the control plane"
    return ctx


def act(ctx: ControlContext, coro: Any) -> Any:
    """Run an action on the scheduler's event loop, as the API's handlers do."""
    return asyncio.run_coroutine_threadsafe(coro, ctx.scheduler.loop.asyncio_loop).result(30)


def api(ctx: ControlContext, path: str, body: Any = None) -> tuple[int, Any]:
    from airflowless.control import mount

    base = mount.link(ctx.scheduler).removesuffix("/airflowless/")
    return call(f"{base}/airflowless/api/v1/{path}", method="POST", token=ctx.token, body=body)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "work"
    folder.mkdir()
    yield folder
    (folder / "go").write_text("go")  # never leave a worker thread waiting


def _start_held(workdir: Path) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def drive() -> None:
        try:
            outcome["result"] = held.run({"workdir": str(workdir)}, cache=False)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what the driver raised
            outcome["error"] = exc

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    eventually(lambda: (workdir / "started").exists(), message="the slow stage never started")
    return thread, outcome


def _running_run(store: Any) -> int:
    return int(eventually(lambda: next((r.id for r in store.list_runs(limit=5) if r.status == "running"), None)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["function", "http"])
def test_a_cancelled_run_is_recorded_cancelled_as_on_sigint(control: ControlContext, workdir: Path,
                                                            how: str) -> None:
    from airflowless.errors import RunCancelled

    thread, outcome = _start_held(workdir)
    store = control.store()
    run_id = _running_run(store)
    if how == "function":
        answer = act(control, actions.cancel_run(control, run_id))
    else:
        status, answer = api(control, f"runs/{run_id}/cancel")
        assert status == 200, answer
    assert answer["accepted"] and answer["drivers"] == 1
    thread.join(60)
    assert isinstance(outcome.get("error"), RunCancelled), outcome
    record = store.get_run(run_id)
    assert record.status == "cancelled" and "control-plane" in (record.error or "")
    assert {s.node: s.status for s in record.stages} == {"slow_first": "cancelled", "then": "cancelled"}
    with pytest.raises(Conflict, match="already finished"):
        act(control, actions.cancel_run(control, run_id))


@pytest.mark.timeout(60)
def test_actions_refuse_what_they_cannot_do(control: ControlContext) -> None:
    with pytest.raises(NotFound):
        act(control, actions.cancel_run(control, 999_999))
    with pytest.raises(BadRequest):
        act(control, actions.cancel_run(control, "x"))
    with pytest.raises(BadRequest, match="replicas"):
        act(control, actions.scale_deployment(control, "app", "Model", -1))
    with pytest.raises(Unavailable, match="no serve controller"):
        act(control, actions.scale_deployment(control, "nothing-here", "Model", 2))
    store = control.store()
    orphan = store.create_run("orphan", module="tests.orphan", params={})  # recorded running, but no driver listens
    with pytest.raises(Unavailable, match="no live driver"):
        act(control, actions.cancel_run(control, orphan))
    with pytest.raises(Unavailable, match="no cluster"):
        asyncio.run(actions.cancel_run(ControlContext("sqlite://"), 1))


def _objective(config: dict[str, Any]) -> None:
    from airflowless import tune

    for step in range(600):
        time.sleep(0.1)
        tune.report({"loss": config["x"] + step})


def _start_tuner(samples: int) -> tuple[threading.Thread, dict[str, Any]]:
    from airflowless import tune

    outcome: dict[str, Any] = {}

    def drive() -> None:
        try:
            outcome["grid"] = tune.Tuner(_objective, param_space={"x": tune.grid_search(list(range(samples)))},
                                         tune_config=tune.TuneConfig(metric="loss", mode="min",
                                                                     max_concurrent_trials=2)).fit()
        except BaseException as exc:  # noqa: BLE001
            outcome["error"] = exc

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return thread, outcome


def _experiment_with_running_trials(store: Any, count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    def found() -> Any:
        for experiment in store.list_experiments(limit=3):
            trials = [t for t in store.list_trials(experiment["id"]) if t["status"] == "running"]
            if experiment["status"] == "running" and len(trials) >= count and all(t["iterations"] for t in trials):
                return experiment, trials
        return None

    return eventually(found, message="no experiment with running trials")  # type: ignore[no-any-return]


@pytest.mark.timeout(180)
def test_a_stopped_trial_ends_stopped_and_the_others_go_on(control: ControlContext) -> None:
    thread, outcome = _start_tuner(samples=2)
    store = control.store()
    experiment, trials = _experiment_with_running_trials(store, 2)
    victim, other = trials
    answer = act(control, actions.stop_trial(control, victim["id"]))
    assert answer["trial"] == victim["name"]
    eventually(lambda: {t["id"]: t["status"] for t in store.list_trials(experiment["id"])}[victim["id"]] == "stopped")
    assert {t["id"]: t["status"] for t in store.list_trials(experiment["id"])}[other["id"]] == "running"
    with pytest.raises(Conflict, match="already ended"):
        act(control, actions.stop_trial(control, victim["id"]))
    status, answer = api(control, f"experiments/{experiment['id']}/stop")  # ends the rest over HTTP
    assert status == 200, answer
    thread.join(90)
    assert "grid" in outcome, outcome
    assert store.find_experiment(experiment["id"])["status"] == "stopped"
    assert {t["status"] for t in store.list_trials(experiment["id"])} == {"stopped"}


@pytest.mark.timeout(180)
def test_a_stopped_experiment_starts_no_new_trials(control: ControlContext) -> None:
    thread, outcome = _start_tuner(samples=5)  # two at a time: three wait for a slot
    store = control.store()
    experiment, _ = _experiment_with_running_trials(store, 2)
    act(control, actions.stop_experiment(control, experiment["id"]))
    thread.join(90)
    assert "grid" in outcome, outcome
    assert store.find_experiment(experiment["id"])["status"] == "stopped"
    trials = store.list_trials(experiment["id"])
    assert len(trials) == 2 and {t["status"] for t in trials} == {"stopped"}
    assert all(t["iterations"] < 600 for t in trials)
    with pytest.raises(Conflict, match="not running"):
        act(control, actions.stop_experiment(control, experiment["id"]))


@pytest.mark.timeout(180)
def test_a_scaled_deployment_gets_a_second_replica_that_answers(control: ControlContext) -> None:
    from airflowless import serve

    @serve.deployment(num_replicas=1)
    class Who:
        def __call__(self, body: Any) -> dict[str, Any]:
            import os

            return {"pid": os.getpid()}  # replicas are placed on the two workers in turn

    serve.run(Who.bind(), name="scaled", route_prefix="/who")
    try:
        address = serve.http_address()

        def ask() -> Any:
            request = urllib.request.Request(f"{address}/who", data=b"{}", method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())

        first = ask()
        eventually(lambda: any(d["app"] == "scaled" for d in live.latest_serve(control.scheduler)["deployments"]))
        with pytest.raises(NotFound, match="no deployment 'Nope'"):
            act(control, actions.scale_deployment(control, "scaled", "Nope", 2))
        status, answer = api(control, "deployments/scaled/Who/scale", {"replicas": 2})
        assert status == 200 and answer["recorded"] == 1, answer
        recorded = [d for d in control.store().list_deployments(status="running") if d["app"] == "scaled"]
        assert [(d["deployment"], d["num_replicas"]) for d in recorded] == [("Who", 2)]  # at once, not when redeployed
        eventually(lambda: serve.status()["scaled"]["deployments"]["Who"]["running_replicas"] == 2)
        assert serve.status()["scaled"]["deployments"]["Who"]["target_replicas"] == 2
        answers = {json.dumps(ask(), sort_keys=True) for _ in range(40)}
        assert len(answers) == 2, f"one replica answered every request: {answers} (first: {first})"
        act(control, actions.scale_deployment(control, "scaled", "Who", 1))
        eventually(lambda: serve.status()["scaled"]["deployments"]["Who"]["running_replicas"] == 1)
    finally:
        serve.shutdown()
