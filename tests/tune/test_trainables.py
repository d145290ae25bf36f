"""Trainer trials under a scheduler that stops early stop at the very report it judged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflowless import tune
from airflowless.train import RunConfig
from airflowless.tune.controller import TuneController
from airflowless.tune.schedulers.base import Decision, FIFOScheduler, TrialView
from airflowless.tune.search.searcher import BasicVariantGenerator

# loss per report of each config; ASHA(grace_period=1, reduction_factor=2, max_t=8), one trial at a time,
# min mode: 0 passes every rung alone; 1 beats 0 at rung 1, loses at rung 2; 2 passes rungs 1 and 2
# and loses at rung 4; 3 loses at rung 1. Ray's stopping rule stops them at iterations [8, 2, 4, 1].
CURVES = [[1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3],
          [0.5, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
          [0.4, 0.1, 0.1, 5.0, 5.0, 5.0, 5.0, 5.0],
          [9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0]]
STOPPED_AT = [8, 2, 4, 1]


def curve_loop(config: dict[str, Any]) -> None:
    """Every rank reports the config's curve as fast as it can; rank 0 notes each report it went on from."""
    from airflowless import train

    which = CURVES.index(config["curve"])
    for step, loss in enumerate(config["curve"], 1):
        train.report({"loss": loss})
        if train.get_context().get_world_rank() == 0:
            (Path(config["log"]) / f"{which}-{step}").touch()


@pytest.mark.usefixtures("cluster_client", "home")
@pytest.mark.parametrize("num_workers", [1, 2])
def test_trainer_trials_stop_exactly_at_their_asha_rung(num_workers: int, tmp_path: Path) -> None:
    from airflowless.train import DataParallelTrainer, ScalingConfig

    trainer = DataParallelTrainer(curve_loop, train_loop_config={"curve": [], "log": str(tmp_path)},
                                  scaling_config=ScalingConfig(num_workers=num_workers))
    asha = tune.ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2)
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {"curve": tune.grid_search(CURVES)}},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=asha,
                                                  max_concurrent_trials=1),
                      run_config=RunConfig(name=f"exact-rungs-{num_workers}", verbose=0)).fit()
    assert grid.errors == [] and grid.num_terminated == 4
    for result in grid:
        which = CURVES.index(result.config["train_loop_config"]["curve"])
        stopped_at = STOPPED_AT[which]
        assert [h["training_iteration"] for h in result.metrics_history] == list(range(1, stopped_at + 1))
        assert result.metrics["training_iteration"] == stopped_at  # its result is the judged report
        assert result.metrics["loss"] == CURVES[which][stopped_at - 1]
    # the runs themselves stopped there: rank 0 went on from every report before the judged one, not from it
    went_on = {which: sorted(int(p.name.split("-")[1]) for p in tmp_path.glob(f"{which}-*")) for which in range(4)}
    assert went_on == {which: list(range(1, stopped_at)) for which, stopped_at in enumerate(STOPPED_AT)}


def test_reports_sent_after_a_stop_are_not_the_trials_result() -> None:
    class StopAtTwo(FIFOScheduler):
        def on_trial_result(self, trial: TrialView, result: dict[str, Any]) -> Decision:
            return Decision.STOP if result["training_iteration"] >= 2 else Decision.CONTINUE

    searcher = BasicVariantGenerator()
    searcher.set_search_properties("loss", "min", {"x": 1}, 1, 0)
    ctrl = TuneController(searcher=searcher, scheduler=StopAtTwo(), max_concurrent=1)
    (start,) = ctrl.next_actions()
    trial_id = start.trial.trial_id
    assert ctrl.on_result(trial_id, {"loss": 1.0, "training_iteration": 1}) == []
    assert ctrl.accepts(trial_id)
    assert [type(a).__name__ for a in ctrl.on_result(trial_id, {"loss": 0.5, "training_iteration": 2})] == ["Stop"]
    assert not ctrl.accepts(trial_id)
    assert ctrl.on_result(trial_id, {"loss": 0.1, "training_iteration": 3}) == []  # its run went on a little
    ctrl.on_complete(trial_id)
    trial = ctrl.trials[trial_id]
    assert [r["training_iteration"] for r in trial.results] == [1, 2] and trial.last_result["loss"] == 0.5
