"""Population based training: scripted decisions, and a real exploit of a better trial's checkpoint."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from airflowless import tune
from airflowless.errors import ConfigError
from airflowless.train import Checkpoint
from airflowless.tune.schedulers import Decision, PopulationBasedTraining, TrialView


def test_a_bottom_trial_pauses_and_gets_a_perturbed_config_and_a_donor_checkpoint() -> None:
    pbt = PopulationBasedTraining(metric="score", mode="max", perturbation_interval=2, quantile_fraction=0.5,
                                  hyperparam_mutations={"lr": [0.01, 0.1, 1.0]}, resample_probability=0.0, seed=0)
    for tid, lr in (("good", 1.0), ("bad", 0.01)):
        pbt.on_trial_add(TrialView(tid, {"lr": lr}, 0))
    assert pbt.on_trial_result(TrialView("good", {"lr": 1.0}, 2),
                               {"training_iteration": 2, "score": 2.0, "checkpoint_uri": "/ckpt/good-2"}) \
        == Decision.CONTINUE
    decision = pbt.on_trial_result(TrialView("bad", {"lr": 0.01}, 2), {"training_iteration": 2, "score": 0.02})
    assert decision == Decision.PAUSE
    config, uri, iteration = pbt.exploit_for("bad")
    assert uri == "/ckpt/good-2" and iteration == 2
    assert config["lr"] in (0.1, 1.0), "the donor's choice or its neighbour"
    assert pbt.exploit_for("bad") is None


def test_pbt_needs_mutations() -> None:
    with pytest.raises(ConfigError, match="hyperparam_mutations"):
        PopulationBasedTraining(metric="score", mode="max")


def _grow(config: dict) -> None:
    checkpoint = tune.get_checkpoint()
    value = 0.0
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            value = float(Path(folder, "value").read_text())
    for _ in range(12):
        time.sleep(0.05)  # long enough for the four trials to overlap
        value += config["lr"]
        folder = tempfile.mkdtemp()
        Path(folder, "value").write_text(str(value))
        tune.report({"score": value}, checkpoint=Checkpoint.from_directory(folder))


@pytest.mark.usefixtures("cluster_client", "home")
def test_pbt_copies_the_better_trials_state() -> None:
    pbt = PopulationBasedTraining(metric="score", mode="max", perturbation_interval=3, quantile_fraction=0.5,
                                  hyperparam_mutations={"lr": [0.01, 1.0]}, resample_probability=0.0, seed=1)
    grid = tune.Tuner(_grow, param_space={"lr": tune.grid_search([1.0, 0.01, 1.0, 0.01])},
                      tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt,
                                                  max_concurrent_trials=2)).fit()
    # a good and a bad trial run side by side (two worker slots), so the bad one has a donor
    assert grid.num_errors == 0
    finals = sorted(r.metrics["score"] for r in grid)
    # Without PBT the two lr=0.01 trials end at 0.12; exploiting the lr=1.0 trial next to them lifts them.
    assert sum(f > 1.0 for f in finals) >= 3, finals
    assert os.path.exists(grid.get_best_result().checkpoint.path)  # type: ignore[union-attr]
