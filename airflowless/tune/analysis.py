"""Ray's legacy entry point: ``tune.run(trainable, config=...)`` and the :class:`ExperimentAnalysis` it returns.

Code written for Ray's older API runs as it is; it is a :class:`~.tuner.Tuner`
underneath (every option maps to one of ``TuneConfig`` or ``RunConfig``), so
the record, the pages and ``Tuner.restore`` work the same. New code should
use ``Tuner(...).fit()``.

>>> from airflowless import tune
>>> analysis = tune.run(objective, config={"x": tune.uniform(0, 10)}, num_samples=8,  # doctest: +SKIP
...                     metric="loss", mode="min")
>>> analysis.best_config                                                              # doctest: +SKIP
{'x': 3.02}
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from ..errors import ConfigError, TrialsErroredError, UsageError
from ..train.checkpoint import Checkpoint
from ..train.config import CheckpointConfig, RunConfig
from ..train.result import Result
from .config import TuneConfig
from .result_grid import ResultGrid
from .tuner import Tuner
from .wrappers import with_resources

__all__ = ["ExperimentAnalysis", "run"]


class ExperimentAnalysis:
    """What ``tune.run`` returns: the experiment's results, read with Ray's names.

    ``metric`` and ``mode`` default to the ones ``tune.run`` was given; the
    :class:`~.result_grid.ResultGrid` is :attr:`result_grid`.
    """

    def __init__(self, result_grid: ResultGrid, metric: str | None = None, mode: str | None = None) -> None:
        self.result_grid = result_grid
        self.default_metric, self.default_mode = metric, mode

    @property
    def trials(self) -> list[Result]:
        """Every trial's :class:`~airflowless.train.Result` (Ray: its Trial objects)."""
        return list(self.result_grid)

    @property
    def experiment_path(self) -> str:
        return str(self.result_grid.experiment_path)

    def _metric_mode(self, metric: str | None, mode: str | None) -> tuple[str, str]:
        metric, mode = metric or self.default_metric, mode or self.default_mode
        if metric is None or mode is None:
            raise ConfigError("the best trial needs a metric and a mode: pass metric= and mode= to tune.run, "
                              "or to this call")
        return metric, mode

    def get_best_trial(self, metric: str | None = None, mode: str | None = None, scope: str = "last") -> Result:
        """The best trial (here its :class:`~airflowless.train.Result`), by ``metric`` and ``mode``."""
        return self.result_grid.get_best_result(*self._metric_mode(metric, mode), scope)

    get_best_result = get_best_trial

    def get_best_config(self, metric: str | None = None, mode: str | None = None, scope: str = "last"
                        ) -> dict[str, Any]:
        return self.get_best_trial(metric, mode, scope).config or {}

    def get_best_checkpoint(self, trial: Result, metric: str | None = None, mode: str | None = None
                            ) -> Checkpoint | None:
        """``trial``'s checkpoint whose report scored best on ``metric`` (Ray's signature: the trial first)."""
        if not isinstance(trial, Result):
            raise UsageError(f"get_best_checkpoint takes the trial first, as Ray's: "
                             f"get_best_checkpoint(analysis.best_trial, metric, mode); got {trial!r}")
        return trial.get_best_checkpoint(*self._metric_mode(metric, mode))

    @property
    def best_trial(self) -> Result:
        return self.get_best_trial()

    @property
    def best_result(self) -> dict[str, Any]:
        """The last report of the best trial (by the default metric and mode)."""
        return dict(self.best_trial.metrics or {})

    @property
    def best_config(self) -> dict[str, Any]:
        return self.get_best_config()

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        """The best trial's best checkpoint (by the default metric and mode)."""
        return self.get_best_checkpoint(self.best_trial)

    @property
    def best_logdir(self) -> str | None:
        """The best trial's folder."""
        return self.best_trial.path

    best_path = best_logdir

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """Each trial's last report, by trial id."""
        return {str((r.metrics or {}).get("trial_id") or (r.path or "").rstrip("/").rsplit("/", 1)[-1]):
                dict(r.metrics or {}) for r in self.result_grid}

    @property
    def results_df(self) -> Any:
        """One row per trial: its last report and config (a pandas DataFrame)."""
        return self.result_grid.get_dataframe()

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        """One row per trial; with ``metric`` and ``mode``, each trial's best report by it instead of its last."""
        if (metric is None) != (mode is None):
            raise ConfigError("dataframe takes metric and mode together, e.g. dataframe(metric='loss', mode='min')")
        return self.result_grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    def __repr__(self) -> str:
        return f"ExperimentAnalysis({self.result_grid!r})"


def run(run_or_experiment: Any, *, config: dict[str, Any] | None = None, name: str | None = None,
        metric: str | None = None, mode: str | None = None, stop: Any = None, num_samples: int = 1,
        storage_path: str | None = None, search_alg: Any = None, scheduler: Any = None, max_failures: int = 0,
        callbacks: Any = None, max_concurrent_trials: int | None = None, resources_per_trial: Any = None,
        checkpoint_freq: int = 0, checkpoint_at_end: bool = False,
        verbose: int | None = None, raise_on_failed_trial: bool = True, **unsupported: Any) -> ExperimentAnalysis:
    """Search ``config`` over ``run_or_experiment`` (a function or a Trainer) as Ray's ``tune.run`` does.

    Raises :class:`~airflowless.errors.TrialsErroredError` when a trial errored and
    ``raise_on_failed_trial`` (Ray's ``TuneError``); its ``result_grid`` holds every trial.
    """
    if unsupported:
        taken = [name for name in inspect.signature(run).parameters if name not in ("run_or_experiment", "unsupported")]
        raise ConfigError(f"tune.run does not take {sorted(unsupported)} here; it takes {taken}. "
                          "Tuner(...) has the rest (TuneConfig, RunConfig)")
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    tuner = Tuner(trainable, param_space=config or {},
                  tune_config=TuneConfig(metric=metric, mode=mode, num_samples=num_samples, search_alg=search_alg,
                                         scheduler=scheduler, max_failures=max_failures,
                                         max_concurrent_trials=max_concurrent_trials,
                                         # within a pipeline stage, errored trials raise unless allowed
                                         max_errored_trials=None if raise_on_failed_trial else sys.maxsize),
                  run_config=RunConfig(name=name, storage_path=storage_path, stop=stop, callbacks=list(callbacks or ()),
                                       verbose=1 if verbose is None else verbose,
                                       checkpoint_config=CheckpointConfig(checkpoint_frequency=checkpoint_freq,
                                                                          checkpoint_at_end=checkpoint_at_end)))
    grid = tuner.fit()
    if raise_on_failed_trial and grid.num_errors:
        first = str(grid.errors[0]).strip().splitlines()
        raise TrialsErroredError(f"{grid.num_errors} of {len(grid)} trial(s) errored, the first with: "
                                 f"{first[0] if first else repr(grid.errors[0])}; pass raise_on_failed_trial=False "
                                 "to get the analysis anyway", grid)
    return ExperimentAnalysis(grid, metric, mode)
