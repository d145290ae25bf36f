"""A Tuner whose trials errored does not pass for a success inside a pipeline stage (issue 24.6)."""

from __future__ import annotations

import pytest

from airflowless import pipeline, stage, tune
from airflowless.errors import ConfigError, PipelineRunError, TrialsErroredError

pytestmark = pytest.mark.usefixtures("cluster_client")


def _trainable(config: dict) -> None:
    if config["x"] == 2:
        raise ValueError("x=2 breaks the model")
    tune.report({"loss": float(config["x"])})


@stage(cache=False)
def search(accepted: int | None) -> dict:
    grid = tune.Tuner(_trainable, param_space={"x": tune.grid_search([1, 2, 3])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", max_errored_trials=accepted)).fit()
    return {"best": grid.get_best_result().config["x"], "errors": grid.num_errors}


@pipeline
def tuning(accepted: int | None = None):
    return search(accepted)


def test_errored_trials_fail_the_stage_unless_accepted(store) -> None:  # noqa: ANN001
    with pytest.raises(PipelineRunError, match=r"TrialsErroredError: 1 of 3 trials .* errored"):
        tuning.run({}, store=store)
    accepted = tuning.run({"accepted": 1}, store=store)
    assert accepted.value == {"best": 1, "errors": 1}

    # the experiment links to the run and stage that started it, and the run to its experiments (issue 25.6)
    from airflowless.control import reads

    started = store.experiments_of_run(accepted.run_id)
    assert [(e["kind"], e["stage"], e["status"]) for e in started] == [("tune", "search", "completed_with_errors")]
    assert store.find_experiment(started[0]["id"])["run_id"] == accepted.run_id
    shown = reads.run(store, accepted.run_id)["experiments"]
    assert [(e["id"], e["stage"], e["status"]) for e in shown] == [(started[0]["id"], "search", "completed_with_errors")]
    assert reads.experiment(store, started[0]["id"])["run_id"] == accepted.run_id
    failed = store.list_runs(limit=2)[1]
    assert [e["stage"] for e in store.experiments_of_run(failed.id)] == ["search"], "a failed run keeps its link"


def test_outside_a_stage_the_grid_keeps_its_errors_as_in_ray_unless_a_bound_is_given() -> None:
    space = {"x": tune.grid_search([1, 2, 3])}
    grid = tune.Tuner(_trainable, param_space=space).fit()
    assert grid.num_errors == 1
    with pytest.raises(TrialsErroredError, match="1 of 3 trials") as raised:
        tune.Tuner(_trainable, param_space=space, tune_config=tune.TuneConfig(max_errored_trials=0)).fit()
    assert raised.value.result_grid.num_errors == 1
    with pytest.raises(ConfigError, match="max_errored_trials must be an integer >= 0"):
        tune.TuneConfig(max_errored_trials=-1)
