"""TensorBoard event files per trial, in the trial's folder (Ray's ``TBXLoggerCallback``).

>>> from airflowless import tune
>>> from airflowless.tune.logger import TBXLoggerCallback
>>> tune.Tuner(objective, param_space={"lr": tune.loguniform(1e-4, 1e-1)},     # doctest: +SKIP
...            run_config=tune.RunConfig(callbacks=[TBXLoggerCallback()])).fit()

Then ``tensorboard --logdir <experiment folder>`` shows one run per trial.
As in Ray: each numeric value of a report is a scalar named
``ray/tune/<name>`` (nested results flattened with ``/``) at step
``timesteps_total`` if reported, else ``training_iteration``; lists of numbers
are histograms; when the trial ends its config and last results are written as
TensorBoard hparams (the HPARAMS tab compares trials). A trial folder on
remote storage (an fsspec URL) gets its event files when the trial ends; they
are written to a local folder until then.
"""

from __future__ import annotations

import numbers
import shutil
import tempfile
from typing import Any

from ..callback import LoggerCallback
from ..trial import Trial
from .flat import flatten

__all__ = ["TBXLoggerCallback"]

_SKIPPED = ("config", "pid", "timestamp", "time_total_s", "training_iteration")  # Ray leaves these out too


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value


class TBXLoggerCallback(LoggerCallback):
    """Writes each trial's reports as TensorBoard scalars (``events.out.tfevents.*`` in its folder)."""

    def __init__(self) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as exc:
            raise ImportError('TBXLoggerCallback needs tensorboardX: pip install "airflowless[tracking]"') from exc
        self._writer_class = SummaryWriter
        self._writers: dict[str, Any] = {}
        self._staged: dict[str, str] = {}  # trial -> local folder written for a remote trial folder
        self._last: dict[str, dict[str, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # saved with the experiment's state: open writers stay here; a restored trial starts a new event file
        return {**self.__dict__, "_writer_class": None, "_writers": {}, "_staged": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tensorboardX import SummaryWriter

        self.__dict__.update(state, _writer_class=SummaryWriter)

    def log_trial_start(self, trial: Trial) -> None:
        if trial.trial_id in self._writers:  # a trial running again goes on in a new event file
            self._writers.pop(trial.trial_id).close()
        folder = trial.local_path
        if folder is None:
            folder = self._staged.setdefault(trial.trial_id, tempfile.mkdtemp(prefix=f"tbx-{trial.trial_id}-"))
        self._writers[trial.trial_id] = self._writer_class(logdir=folder, flush_secs=30)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        if trial.trial_id not in self._writers:
            self.log_trial_start(trial)
        writer = self._writers[trial.trial_id]
        step = result.get("timesteps_total") or result.get("training_iteration", iteration)
        values = flatten({k: v for k, v in result.items() if k not in _SKIPPED})
        scalars: dict[str, Any] = {}
        for name, value in values.items():
            tag = f"ray/tune/{name}"
            if _is_number(value):
                writer.add_scalar(tag, value, global_step=step)
                scalars[tag] = value
            elif isinstance(value, (list, tuple)) and value and all(_is_number(v) for v in value):
                writer.add_histogram(tag, list(value), global_step=step)
        self._last[trial.trial_id] = scalars
        writer.flush()

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        writer = self._writers.pop(trial.trial_id, None)
        if writer is None:
            return
        self._write_hparams(writer, trial)
        writer.close()
        staged = self._staged.pop(trial.trial_id, None)
        if staged is not None and trial.path is not None:
            import fsspec

            fs, remote = fsspec.core.url_to_fs(trial.path)
            fs.put(f"{staged}/", remote, recursive=True)
            shutil.rmtree(staged, ignore_errors=True)

    def _write_hparams(self, writer: Any, trial: Trial) -> None:
        from tensorboardX.summary import hparams

        params = {k: v for k, v in flatten(trial.config).items()
                  if isinstance(v, (str, bool, int, float)) or v is None}
        params = {k: (str(v) if v is None else v) for k, v in params.items()}
        metrics = self._last.pop(trial.trial_id, {})
        if not params:
            return
        for summary in hparams(hparam_dict=params, metric_dict=metrics):
            writer.file_writer.add_summary(summary)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial_id in list(self._writers):
            self._writers.pop(trial_id).close()
