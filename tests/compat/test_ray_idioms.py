"""Ray Train/Tune idioms written as Ray's docs write them: checkpoint metadata, a result's best checkpoint, the
trial's context, and ``Tuner.can_restore``."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

# Ray: from ray import train, tune; from ray.train import Checkpoint, RunConfig
from airflowless import data, train, tune
from airflowless.errors import ConfigError, TrialsErroredError, UsageError
from airflowless.train import Checkpoint, RunConfig

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def trainable(config: dict[str, Any]) -> None:
    context = train.get_context()
    for step in range(4):
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"step": step}))
            checkpoint = Checkpoint.from_directory(folder)
            checkpoint.set_metadata({"step": step})
            checkpoint.update_metadata({"offset": config["offset"]})
            train.report({"loss": abs(step - 2) + config["offset"], "trial": context.get_trial_id(),
                          "experiment": context.get_experiment_name(), "dir": context.get_trial_dir()},
                         checkpoint=checkpoint)


def _grid(tmp_path: Path, name: str) -> tune.ResultGrid:
    return tune.Tuner(
        trainable, param_space={"offset": tune.grid_search([0.0, 1.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(name=name, storage_path=str(tmp_path))).fit()


def test_best_checkpoint_metadata_context_and_can_restore(tmp_path: Path) -> None:
    grid = _grid(tmp_path, "idioms")
    best = grid.get_best_result()
    assert best.metrics["loss"] == 1.0  # the last report of the better trial
    found = best.get_best_checkpoint(metric="loss", mode="min")
    assert found is not None and found.get_metadata() == {"step": 2, "offset": 0.0}
    assert best.get_best_checkpoint(metric="loss", mode="max").get_metadata()["step"] == 0
    assert best.get_best_checkpoint(metric="no-such-metric", mode="min") is None
    with pytest.raises(ConfigError, match="mode is 'min' or 'max'"):
        best.get_best_checkpoint(metric="loss", mode="lowest")
    assert best.metrics["experiment"] == "idioms" and best.metrics["trial"] in best.path
    assert best.metrics["dir"].rstrip("/") == best.path.rstrip("/")
    assert tune.Tuner.can_restore(str(tmp_path / "idioms"))
    assert not tune.Tuner.can_restore(str(tmp_path / "never-ran"))
    with pytest.raises(ConfigError, match="JSON-serializable"):
        found.set_metadata({"when": object()})


def test_a_result_is_read_back_from_its_trials_folder(tmp_path: Path) -> None:
    # Ray: result = Result.from_path(path)
    from airflowless.train import Result

    best = _grid(tmp_path, "from-path").get_best_result()
    again = Result.from_path(best.path)
    assert again.path == best.path and again.config == best.config
    assert again.metrics["loss"] == best.metrics["loss"] and again.error is None
    assert [r["loss"] for r in again.metrics_history] == [r["loss"] for r in best.metrics_history]
    assert [r["training_iteration"] for r in again.metrics_history] == [1, 2, 3, 4]
    assert again.checkpoint is not None and again.checkpoint.path == best.checkpoint.path
    assert again.get_best_checkpoint("loss", "min") is not None
    with pytest.raises(ConfigError, match="no Tune trial or Trainer fit"):
        Result.from_path(str(tmp_path / "from-path" / "no-such-trial"))


def timed(config: dict[str, Any]) -> None:
    import time

    for step in range(3):
        time.sleep(0.05)
        train.report({"loss": 1.0 / (step + 1)})


def test_results_carry_rays_auto_filled_fields_and_the_dataframe_a_trial_id() -> None:
    # Ray: result.metrics["trial_id"], ["time_total_s"], ["time_this_iter_s"], ["timestamp"], ["date"]
    grid = tune.Tuner(timed, param_space={"x": tune.grid_search([1, 2])}, run_config=RunConfig(name="auto-filled"),
                      tune_config=tune.TuneConfig(metric="loss", mode="min")).fit()
    for result in grid:
        history = result.metrics_history
        assert [h["training_iteration"] for h in history] == [1, 2, 3]
        assert {h["trial_id"] for h in history} == {Path(result.path).name}
        assert all(h["time_this_iter_s"] >= 0.04 for h in history)  # each slept 50 ms before it reported
        assert history[-1]["time_total_s"] == pytest.approx(sum(h["time_this_iter_s"] for h in history))
        assert all(isinstance(h["timestamp"], int) and len(h["date"]) == len("2026-11-28_01-02-03") for h in history)
    frame = grid.get_dataframe()
    assert sorted(frame["trial_id"]) == sorted(Path(r.path).name for r in grid)


def quadratic(config: dict[str, Any]) -> None:
    for step in range(1, 4):
        train.report({"loss": (config["x"] - 3) ** 2 + 1 / step})
    if config["x"] == 99:
        raise RuntimeError("x=99 is refused")


def test_the_legacy_tune_run_returns_an_analysis(tmp_path: Path) -> None:
    # Ray: analysis = tune.run(fn, config=..., metric=, mode=); analysis.best_config / best_result / dataframe()
    analysis = tune.run(quadratic, config={"x": tune.grid_search([1, 3, 4])}, metric="loss", mode="min",
                        name="legacy-run", storage_path=str(tmp_path), resources_per_trial={"cpu": 1})
    assert analysis.best_config == {"x": 3}
    assert analysis.best_result["loss"] == pytest.approx(1 / 3) and analysis.best_result["training_iteration"] == 3
    assert sorted(analysis.dataframe()["config/x"]) == [1, 3, 4]
    best_rows = analysis.dataframe(metric="loss", mode="min")
    assert sorted(best_rows["loss"]) == pytest.approx(sorted([4 + 1 / 3, 1 / 3, 1 + 1 / 3]))
    assert set(analysis.results) == set(analysis.results_df["trial_id"])
    assert analysis.best_logdir is not None and analysis.best_logdir.startswith(str(tmp_path))
    assert analysis.best_trial.config == {"x": 3} and analysis.get_best_trial("loss", "max").config == {"x": 1}
    with pytest.raises(ConfigError, match=r"does not take \['resume'\]"):
        tune.run(quadratic, config={}, resume=True)
    with pytest.raises(TrialsErroredError, match="1 of 2 trial\\(s\\) errored, the first with: .*x=99 is refused"):
        tune.run(quadratic, config={"x": tune.grid_search([3, 99])}, metric="loss", mode="min", name="legacy-fail")
    kept = tune.run(quadratic, config={"x": tune.grid_search([3, 99])}, metric="loss", mode="min",
                    name="legacy-kept", raise_on_failed_trial=False)
    assert kept.best_config == {"x": 3} and len(kept.trials) == 2


def test_the_legacy_tune_run_checkpoints_a_class_trainable(tmp_path: Path) -> None:
    # Ray: tune.run(MyTrainable, checkpoint_freq=2, checkpoint_at_end=True); get_best_checkpoint(trial, metric, mode)
    analysis = tune.run(Climber, config={"rate": 1.0, "fail_once": False, "marks": str(tmp_path)}, metric="height",
                        mode="max", name="legacy-climber", checkpoint_freq=2, checkpoint_at_end=True)
    best = analysis.get_best_checkpoint(analysis.best_trial, "height", "max")
    assert best is not None and Path(best.path, "height.txt").read_text() == "6.0"  # the last, at iteration 6
    assert analysis.best_checkpoint is not None and analysis.best_checkpoint.path == best.path
    with pytest.raises(UsageError, match="the trial first"):
        analysis.get_best_checkpoint("height", "max")


class Climber(tune.Trainable):
    """Ray's class API, as Ray's docs write it: state in setup, one step per iteration, a checkpoint as a file."""

    def setup(self, config: dict[str, Any]) -> None:
        self.height, self.rate = 0.0, config["rate"]

    def step(self) -> dict[str, Any]:
        if self.iteration == 4 and self.config["fail_once"] and not Path(self.config["marks"], "failed").exists():
            Path(self.config["marks"], "failed").touch()
            raise RuntimeError("a crash after the checkpoint of iteration 4")
        self.height += self.rate
        return {"height": self.height, "done": self.height >= 6 * self.rate}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "height.txt").write_text(str(self.height))

    def load_checkpoint(self, checkpoint: Any) -> None:
        Path(self.config["marks"], "loaded").write_text(Path(checkpoint, "height.txt").read_text())
        self.height = float(Path(checkpoint, "height.txt").read_text())


class Scaled(tune.Trainable):
    """A class trainable given an object by tune.with_parameters (Ray passes it to setup)."""

    def setup(self, config: dict[str, Any], table: list[float] | None = None) -> None:
        self.table, self.scale = table or [], config["scale"]

    def step(self) -> dict[str, Any]:
        return {"total": self.scale * sum(self.table), "done": True}


def test_a_class_trainable_takes_parameters_and_resources() -> None:
    # Ray: tune.with_resources(tune.with_parameters(MyTrainable, data=data), {"cpu": 1})
    wrapped = tune.with_resources(tune.with_parameters(Scaled, table=[1.0, 2.0, 3.0]), {"CPU": 1})
    grid = tune.Tuner(wrapped, param_space={"scale": tune.grid_search([1.0, 10.0])},
                      tune_config=tune.TuneConfig(metric="total", mode="max")).fit()
    assert sorted(r.metrics["total"] for r in grid) == [6.0, 60.0]


def test_the_class_api_steps_checkpoints_and_resumes_after_a_crash(tmp_path: Path) -> None:
    # Ray: class MyTrainable(tune.Trainable): setup / step / save_checkpoint / load_checkpoint
    grid = tune.Tuner(Climber, param_space={"rate": tune.grid_search([1.0, 2.0]), "fail_once": False,
                                            "marks": str(tmp_path)},
                      tune_config=tune.TuneConfig(metric="height", mode="max"),
                      run_config=RunConfig(name="climber", stop={"training_iteration": 10},
                                           checkpoint_config=train.CheckpointConfig(checkpoint_frequency=2,
                                                                                    checkpoint_at_end=True))).fit()
    by_rate = {r.config["rate"]: r for r in grid}
    assert [h["height"] for h in by_rate[2.0].metrics_history] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]  # done at 12
    assert by_rate[2.0].metrics["training_iteration"] == 6 and by_rate[2.0].checkpoint is not None
    assert by_rate[2.0].checkpoint.path.endswith("checkpoint_000006")  # saved at the end, as at 2 and 4

    crashed = tune.Tuner(Climber, param_space={"rate": 1.0, "fail_once": True, "marks": str(tmp_path)},
                         tune_config=tune.TuneConfig(metric="height", mode="max", max_failures=1),
                         run_config=RunConfig(name="climber-crash", checkpoint_config=train.CheckpointConfig(
                             checkpoint_frequency=2))).fit()
    (result,) = crashed
    assert result.error is None and (tmp_path / "loaded").read_text() == "4.0"  # restored at its checkpoint
    assert [h["height"] for h in result.metrics_history] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def counting_loop(config: dict[str, Any]) -> None:
    """Counts to 6, a checkpoint per step; the first run crashes after step 3 (a mark file says it ran)."""
    import json
    import tempfile

    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads(Path(folder, "state.json").read_text())["count"]
    for count in range(start + 1, 7):
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"count": count}))
            train.report({"count": count, "rows": train.get_dataset_shard("train").count()},
                         checkpoint=Checkpoint.from_directory(folder))
        if count == 3 and not Path(config["marks"], "crashed").exists():
            Path(config["marks"], "crashed").touch()
            raise RuntimeError("a crash after step 3")


def test_a_trainer_restores_from_its_folder_after_a_crash(tmp_path: Path) -> None:
    # Ray: if TorchTrainer.can_restore(path): trainer = TorchTrainer.restore(path, datasets=...); trainer.fit()
    from airflowless.errors import TrainingFailedError
    from airflowless.train.torch import TorchTrainer

    datasets = {"train": data.range(12, parallelism=2)}
    first = TorchTrainer(counting_loop, train_loop_config={"marks": str(tmp_path)}, datasets=datasets,
                         run_config=RunConfig(name="counting", storage_path=str(tmp_path / "runs")))
    with pytest.raises(TrainingFailedError) as failed:
        first.fit()
    path = failed.value.result.path
    assert TorchTrainer.can_restore(path) and not TorchTrainer.can_restore(str(tmp_path))
    with pytest.raises(ConfigError, match=r"\['train'\] missing"):
        TorchTrainer.restore(path)
    result = TorchTrainer.restore(path, datasets=datasets).fit()
    assert [h["count"] for h in result.metrics_history] == [4, 5, 6]  # on from the checkpoint of step 3
    assert [h["training_iteration"] for h in result.metrics_history] == [4, 5, 6]
    assert result.path == path and result.checkpoint is not None and result.checkpoint.path.endswith("000006")
    assert train.Result.from_path(path).metrics["count"] == 6


def slow_counting_loop(config: dict[str, Any]) -> None:
    """Counts to 5, a checkpoint per step, resting after step 2 (so that its driver can be killed mid-fit)."""
    import json
    import tempfile
    import time

    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads(Path(folder, "state.json").read_text())["count"]
    for count in range(start + 1, 6):
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"count": count}))
            train.report({"count": count}, checkpoint=Checkpoint.from_directory(folder))
        if count >= 2:
            time.sleep(config["rest_s"])


_KILLED_DRIVER = """
import sys
from airflowless import data
from airflowless.train import RunConfig
from airflowless.train.torch import TorchTrainer
from tests.compat.test_ray_idioms import slow_counting_loop

TorchTrainer(slow_counting_loop, train_loop_config={"rest_s": 30.0}, datasets={"train": data.range(8)},
             run_config=RunConfig(name="killed", storage_path=sys.argv[1])).fit()
"""


def test_a_trainer_restores_after_its_driver_was_killed(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from airflowless.train.torch import TorchTrainer

    root = Path(__file__).resolve().parents[2]
    driver = subprocess.Popen([sys.executable, "-c", _KILLED_DRIVER, str(tmp_path)], cwd=root, env=os.environ.copy(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    path = tmp_path / "killed"
    try:
        deadline = time.monotonic() + 120
        while not (path / "checkpoint_000002").exists():
            assert driver.poll() is None and time.monotonic() < deadline, "the fit never saved its 2nd checkpoint"
            time.sleep(0.2)
        time.sleep(0.5)  # the checkpoint's copy is complete once the next step rests
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its embedded cluster, at once
        driver.wait(timeout=30)
    assert TorchTrainer.can_restore(str(path))
    result = TorchTrainer.restore(str(path), datasets={"train": data.range(8)},
                                  train_loop_config={"rest_s": 0.0}).fit()
    assert [h["count"] for h in result.metrics_history] == [3, 4, 5]  # from the checkpoint of step 2
