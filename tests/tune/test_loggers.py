"""Tune callbacks and loggers on the real cluster: a real ``mlflow server``, TensorBoard files read back.

One small Tuner (4 function trials, one failing) runs with a recording callback,
``MLflowLoggerCallback`` and ``TBXLoggerCallback`` together; the MLflow side is
read back through ``MlflowClient`` from a ``mlflow server`` subprocess (SQLite
backend, artifacts served by it), the TensorBoard side with tensorboard's own
event reader. A Trainer fit logs through the same callback.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from bokeh.models import Line

from airflowless import train, tune
from airflowless.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig
from tests.conftest import require_module
from tests.support import mlflow as mlflow_support

require_module("mlflow")
require_module("tensorboardX")
require_module("tensorboard")

from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402

from airflowless.tune.logger import MLflowLoggerCallback, TBXLoggerCallback  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster_client", "home")

STEPS = 3


mlflow_server = mlflow_support.mlflow_server  # the fixture


def objective(config: dict[str, Any]) -> None:
    for step in range(1, STEPS + 1):
        if config["x"] == 3 and step == 2:
            raise ValueError("x=3 fails at its second report")
        metrics = {"loss": config["x"] * 10 + step, "nested": {"acc": step / 10}, "note": "text"}
        if step == STEPS:
            with tempfile.TemporaryDirectory() as folder:
                Path(folder, "model.json").write_text(json.dumps({"x": config["x"]}))
                tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


class Recorder(tune.Callback):
    """A Ray-style callback: remembers the hooks called, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.setup_info: dict[str, Any] = {}

    def setup(self, stop: Any = None, num_samples: Any = None, total_num_samples: Any = None, **info: Any) -> None:
        self.setup_info = {"num_samples": num_samples, **info}

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.calls.append(("start", trial.trial_id))

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        assert iteration >= 1 and trial in trials and "checkpoint_uri" not in result
        self.calls.append(("result", f"{trial.trial_id}:{result['training_iteration']}"))

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Checkpoint,
                      **info: Any) -> None:
        assert Path(checkpoint.path, "model.json").exists()
        self.calls.append(("checkpoint", trial.trial_id))

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.calls.append(("complete", trial.trial_id))

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.calls.append(("error", trial.trial_id))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.calls.append(("end", str(len(trials))))


@pytest.mark.timeout(420)
def test_a_tuner_logs_each_trial_to_mlflow_tensorboard_and_callbacks(mlflow_server: str) -> None:
    recorder = Recorder()
    grid = tune.Tuner(
        objective, param_space={"x": tune.grid_search([1, 2, 3, 4]), "model": {"depth": 2, "act": "relu"}},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(name="logged", callbacks=[
            recorder, TBXLoggerCallback(),
            MLflowLoggerCallback(tracking_uri=mlflow_server, experiment_name="tune-logged",
                                 tags={"team": "ml"}, save_artifact=True)])).fit()
    by_x = {r.config["x"]: r for r in grid}
    trial_of = {x: Path(r.path).name for x, r in by_x.items()}
    assert by_x[3].error is not None and grid.num_errors == 1

    # the picture of the same grid: one line per trial, the best (x=1, lowest loss) highlighted
    figure = grid.plot()
    assert sorted(r.name for r in figure.renderers if isinstance(r.glyph, Line)) == sorted(trial_of.values())
    assert [item.label["value"] for item in figure.legend[0].items] == [f"best: {trial_of[1]}"]

    # the Ray-style hooks, in order per trial
    assert recorder.setup_info["num_samples"] == 1 and recorder.setup_info["experiment_name"] == "logged"
    for x, trial_id in trial_of.items():
        mine = [kind for kind, who in recorder.calls if who.split(":")[0] == trial_id]
        if x == 3:
            assert mine == ["start", "result", "error"]
        else:
            assert mine == ["start", "result", "result", "result", "checkpoint", "complete"]
    assert recorder.calls[-1] == ("end", "4")

    # MLflow: one run per trial, named after it, with params, metric histories, artifacts and status
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("tune-logged")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == sorted(trial_of.values())
    for x, trial_id in trial_of.items():
        run = runs[trial_id]
        assert run.data.params == {"x": str(x), "model/depth": "2", "model/act": "relu"}
        assert run.data.tags["trial_name"] == trial_id and run.data.tags["team"] == "ml"
        history = client.get_metric_history(run.info.run_id, "loss")
        steps = STEPS if x != 3 else 1
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
            (s, x * 10 + s) for s in range(1, steps + 1)]
        assert [m.value for m in client.get_metric_history(run.info.run_id, "nested/acc")] == pytest.approx(
            [s / 10 for s in range(1, steps + 1)])
        assert "note" not in run.data.metrics  # not a number: not a metric (as in Ray)
        assert run.info.status == ("FAILED" if x == 3 else "FINISHED")
        if x != 3:
            (checkpoint_dir,) = [a.path for a in client.list_artifacts(run.info.run_id) if a.is_dir
                                 and a.path.startswith("checkpoint")]
            local = client.download_artifacts(run.info.run_id, f"{checkpoint_dir}/model.json",
                                              tempfile.mkdtemp())
            assert json.loads(Path(local).read_text()) == {"x": x}

    # TensorBoard: event files in each trial's folder, scalars per step, and the trial's hparams
    for x, result in by_x.items():
        events = EventAccumulator(result.path)
        events.Reload()
        steps = STEPS if x != 3 else 1
        loss = events.Scalars("ray/tune/loss")
        assert [(e.step, e.value) for e in loss] == [(s, x * 10 + s) for s in range(1, steps + 1)]
        assert [e.step for e in events.Scalars("ray/tune/nested/acc")] == list(range(1, steps + 1))
        start = plugin_data_pb2.HParamsPluginData.FromString(
            events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
        assert start.hparams["x"].number_value == x and start.hparams["model/act"].string_value == "relu"


def _fit_loop(config: dict[str, Any]) -> None:
    for step in range(1, 3):
        train.report({"score": step * config["k"]})


@pytest.mark.timeout(300)
def test_a_trainer_fit_is_one_mlflow_run(mlflow_server: str) -> None:
    trainer = DataParallelTrainer(
        _fit_loop, train_loop_config={"k": 5}, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="fit-logged", verbose=0,
                             callbacks=[MLflowLoggerCallback(tracking_uri=mlflow_server,
                                                             experiment_name="fit-logged")]))
    result = trainer.fit()
    assert result.metrics == {"score": 10}
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("fit-logged")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "fit-logged" and run.info.status == "FINISHED"
    assert run.data.params["train_loop_config/k"] == "5" and run.data.params["trainer"] == "DataParallelTrainer"
    history = client.get_metric_history(run.info.run_id, "score")
    assert sorted((m.step, m.value) for m in history) == [(1, 5.0), (2, 10.0)]


def test_loggers_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="tags"):
        MLflowLoggerCallback(tags=["a"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="setup"):
        from airflowless.tune.trial import Trial

        MLflowLoggerCallback().log_trial_start(Trial("t", {}))
