"""One MLflow run per trial: its config as params, its reports as metrics, its folder as artifacts.

>>> from airflowless import tune
>>> from airflowless.tune.logger import MLflowLoggerCallback
>>> tune.Tuner(objective, param_space={"lr": tune.loguniform(1e-4, 1e-1)},     # doctest: +SKIP
...            run_config=tune.RunConfig(callbacks=[MLflowLoggerCallback(
...                tracking_uri="http://127.0.0.1:5000", experiment_name="lr-search", save_artifact=True)])).fit()

Ray's ``ray.air.integrations.mlflow.MLflowLoggerCallback``, with the same
arguments and behaviour: the MLflow experiment ``experiment_name`` is reused or
created; each trial gets a run named after it (tag ``trial_name``) when it
first starts; its config, flattened with ``/``, is logged as params (at the
start, or at the end with ``log_params_on_trial_end``); each report's numeric
values as metrics at step ``timesteps_total`` if reported, else
``training_iteration``; with ``save_artifact`` the trial's folder (its
checkpoints) is uploaded as the run's artifacts when it ends; the run ends
``FINISHED``, or ``FAILED`` when the trial errored. Differences: without
``experiment_name`` the experiment is named after the Tuner's (or the
Trainer run's) name, where Ray reads ``MLFLOW_EXPERIMENT_NAME`` or fails;
``tracking_uri=None`` lets MLflow choose (``MLFLOW_TRACKING_URI``, else its default).
The callback talks to MLflow from the driver only.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from ...errors import ConfigError
from ..callback import LoggerCallback
from ..trial import Trial
from .flat import flatten

__all__ = ["MLflowLoggerCallback"]

_PARAMS_PER_BATCH = 100  # MLflow's limits for one log_batch call
_METRICS_PER_BATCH = 1000


class MLflowLoggerCallback(LoggerCallback):
    """Logs every trial to an MLflow tracking server (or any MLflow tracking URI)."""

    def __init__(self, tracking_uri: str | None = None, *, registry_uri: str | None = None,
                 experiment_name: str | None = None, tags: dict[str, Any] | None = None,
                 tracking_token: str | None = None, save_artifact: bool = False,
                 log_params_on_trial_end: bool = False) -> None:
        try:
            import mlflow  # noqa: F401
        except ImportError as exc:
            raise ImportError('MLflowLoggerCallback needs mlflow: pip install "airflowless[tracking]"') from exc
        if tags is not None and not isinstance(tags, dict):
            raise ConfigError(f"MLflowLoggerCallback(tags=...) takes a dict of tag names to values, got {tags!r}")
        self.tracking_uri, self.registry_uri = tracking_uri, registry_uri
        self.experiment_name, self.tags = experiment_name, dict(tags or {})
        self.tracking_token = tracking_token
        self.should_save_artifact, self.log_params_on_trial_end = save_artifact, log_params_on_trial_end
        self.client: Any = None
        self.experiment_id: str | None = None
        self._trial_runs: dict[str, str] = {}  # trial id -> MLflow run id

    def __getstate__(self) -> dict[str, Any]:
        # saved with the experiment's state: the client is made again by setup(); a restored
        # experiment goes on logging to the same runs
        return {**self.__dict__, "client": None}

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:
        from mlflow.tracking import MlflowClient

        if self.tracking_token:  # how MLflow's REST client takes a token (as Ray sets it)
            os.environ["MLFLOW_TRACKING_TOKEN"] = self.tracking_token
        self.client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.registry_uri)
        name = self.experiment_name or info.get("experiment_name")
        if not name:
            raise ConfigError("MLflowLoggerCallback needs an experiment_name (the Tuner passes its own name)")
        found = self.client.get_experiment_by_name(name)
        self.experiment_id = found.experiment_id if found is not None else self.client.create_experiment(name)

    def log_trial_start(self, trial: Trial) -> None:
        if self.client is None:
            raise ConfigError("MLflowLoggerCallback.setup() was not called: pass the callback in "
                              "RunConfig(callbacks=[...]) of a Tuner or a Trainer")
        if trial.trial_id in self._trial_runs:  # a trial running again keeps its run
            return
        run = self.client.create_run(self.experiment_id, run_name=str(trial),
                                     tags={**{k: str(v) for k, v in self.tags.items()}, "trial_name": str(trial)})
        self._trial_runs[trial.trial_id] = run.info.run_id
        if not self.log_params_on_trial_end:
            self._log_params(run.info.run_id, trial.config)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        if trial.trial_id not in self._trial_runs:
            self.log_trial_start(trial)
        step = int(result.get("timesteps_total") or result.get("training_iteration", iteration))
        now = int(time.time() * 1000)
        metrics = [Metric(key, float(value), now, step) for key, value in flatten(result).items()
                   if _as_float(value) is not None]
        for start in range(0, len(metrics), _METRICS_PER_BATCH):
            self.client.log_batch(self._trial_runs[trial.trial_id], metrics=metrics[start:start + _METRICS_PER_BATCH])

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        run_id = self._trial_runs.get(trial.trial_id)
        if run_id is None:
            return
        if self.should_save_artifact and trial.path is not None:
            self._save_artifacts(run_id, trial.path)
        if self.log_params_on_trial_end:
            self._log_params(run_id, trial.config)
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    def _log_params(self, run_id: str, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(key, str(value)) for key, value in flatten(config).items()]
        for start in range(0, len(params), _PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=params[start:start + _PARAMS_PER_BATCH])

    def _save_artifacts(self, run_id: str, path: str) -> None:
        import fsspec

        fs, folder = fsspec.core.url_to_fs(path)
        if not fs.exists(folder):  # the trial wrote nothing
            return
        if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
            self.client.log_artifacts(run_id, folder)
            return
        with tempfile.TemporaryDirectory(prefix="mlflow-artifacts-") as local:  # remote storage: via a copy
            fs.get(f"{folder.rstrip('/')}/", local, recursive=True)
            self.client.log_artifacts(run_id, local)


def _as_float(value: Any) -> float | None:
    """What MLflow can log as a metric: numbers (bools included, as Ray logs them), else None."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
