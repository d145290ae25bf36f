"""Promotion ASHA on the real embedded cluster: paused function trials wait in memory and go on later.

A paused trial's task ends (its slot is free) while its function stays blocked
in ``report`` on the worker; a resumed trial continues from that very report,
so no trial runs its first iterations twice.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from airflowless import tune
from airflowless.store import open_store
from airflowless.train import RunConfig

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def constant_loss(config: dict[str, Any]) -> None:
    """Loss x at every iteration; each start of the function is written down."""
    with open(Path(config["log"]) / f"{config['x']}-{os.getpid()}-{os.urandom(4).hex()}", "w"):
        pass
    for _ in range(8):
        tune.report({"loss": float(config["x"])})


def test_paused_trials_resume_in_memory_and_the_best_reaches_max_t(tmp_path: Path) -> None:
    log = tmp_path / "starts"
    log.mkdir()
    asha = tune.ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2, promotion=True)
    grid = tune.Tuner(
        constant_loss, param_space={"x": tune.grid_search([1, 5, 6, 7, 3, 8]), "log": str(log)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=asha, max_concurrent_trials=2),
        run_config=RunConfig(name="promotion")).fit()
    assert len(grid) == 6 and grid.errors == [] and grid.num_terminated == 6
    lengths = {r.config["x"]: len(r.metrics_history) for r in grid}
    # x=1 comes first: alone at rung 1 it pauses, so reaching max_t means it was resumed (at least once)
    assert lengths[1] == 8
    assert lengths[8] < 8 and sum(lengths.values()) < 6 * 8
    for r in grid:  # every run went on from where it paused: no report twice, none missing
        assert [h["training_iteration"] for h in r.metrics_history] == list(range(1, len(r.metrics_history) + 1))
    starts = sorted(int(name.split("-")[0]) for name in os.listdir(log))
    assert starts == [1, 3, 5, 6, 7, 8]  # each function started once: resumed in memory, never re-run
    assert grid.get_best_result().config["x"] == 1

    store = open_store()
    try:
        (experiment,) = [e for e in store.list_experiments() if e["name"] == "promotion"]
        trials = store.list_trials(experiment["id"])
        assert sorted(t["status"] for t in trials) == ["completed"] * 6
        assert sorted(t["iterations"] for t in trials) == sorted(lengths.values())
    finally:
        store.close()


def checkpointed_loop(config: dict[str, Any]) -> None:
    """Loss x at every step, a checkpoint at every step; a resumed run goes on after its checkpoint's step."""
    from airflowless import train

    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = int((Path(folder) / "step").read_text())
    (Path(config["log"]) / f"{config['x']}-{start}").touch()
    for step in range(start + 1, 5):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "step").write_text(str(step))
            train.report({"loss": float(config["x"]), "step": step},
                         checkpoint=train.Checkpoint.from_directory(folder))


def test_paused_trainer_trials_resume_from_their_checkpoints_numbering_on(tmp_path: Path) -> None:
    from airflowless.train import DataParallelTrainer, ScalingConfig

    log = tmp_path / "starts"
    log.mkdir()
    trainer = DataParallelTrainer(checkpointed_loop, train_loop_config={"log": str(log)},
                                  scaling_config=ScalingConfig(num_workers=1))
    asha = tune.ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2, promotion=True)
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {"x": tune.grid_search([1, 5, 6, 7])}},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=asha,
                                                  max_concurrent_trials=1),
                      run_config=RunConfig(name="promotion-trainers")).fit()
    assert grid.errors == [] and grid.num_terminated == 4
    by_x = {r.config["train_loop_config"]["x"]: r for r in grid}
    assert len(by_x[1].metrics_history) == 4  # paused at rung 1 (alone there), resumed, to max_t
    for r in grid:  # resumed runs number their reports on from their checkpoints: each step once, in order
        steps = [h["training_iteration"] for h in r.metrics_history]
        assert steps == [h["step"] for h in r.metrics_history] == list(range(1, len(steps) + 1))
    starts = sorted(name for name in os.listdir(log))
    # each trial started from scratch once; x=1 (paused at rung 1, alone there) again from a checkpoint
    assert sorted(n for n in starts if n.endswith("-0")) == ["1-0", "5-0", "6-0", "7-0"]
    # ...from step 1's: the pause took effect at the very report it was decided on (rank 0 waits for
    # the decision on each report: Recorder.decides_reports), never a report later
    assert "1-1" in starts
