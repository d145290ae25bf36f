"""SklearnTrainer: a scikit-learn estimator fitted by one rank, its ``n_jobs`` fanned out as Dask tasks.

>>> from sklearn.linear_model import LogisticRegression
>>> from airflowless.train.sklearn import SklearnTrainer
>>> trainer = SklearnTrainer(estimator=LogisticRegression(), label_column="is_big_tip",   # doctest: +SKIP
...                          datasets={"train": train_ds, "valid": valid_ds}, cv=3)
>>> result = trainer.fit()                                                               # doctest: +SKIP
>>> result.metrics["valid-score"], result.metrics["cv-test_score-mean"]                 # doctest: +SKIP
>>> model = SklearnTrainer.get_model(result.checkpoint)                                 # doctest: +SKIP

The rank reads the whole ``train`` dataset, fits the estimator under
``joblib.parallel_backend("dask")`` (so ``n_jobs`` work, and the folds of
``cv``, run as tasks across the cluster), scores every dataset, and reports
once: ``<dataset>-score`` (or ``<dataset>-<name>`` for several scorers),
``fit_time``, and ``cv-<key>-mean`` / ``cv-<key>-std`` when ``cv`` is given.
"""

from __future__ import annotations

import contextvars
import os
import pickle
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import ConfigError
from .checkpoint import Checkpoint
from .config import RunConfig, ScalingConfig
from .context import get_dataset_shard
from .gbdt import features_and_label, report_model
from .trainer import BaseTrainer, FitRun

__all__ = ["SklearnTrainer", "MODEL_FILE"]

MODEL_FILE = "model.pkl"


def _scorers(estimator: Any, scoring: Any) -> dict[str, Callable[..., float]]:
    """Metric name -> ``scorer(estimator, X, y)``; ``None`` scores with ``estimator.score``."""
    from sklearn.metrics import check_scoring

    if scoring is None or isinstance(scoring, str) or callable(scoring):
        return {"score": check_scoring(estimator, scoring=scoring)}
    if isinstance(scoring, dict):
        return {str(name): check_scoring(estimator, scoring=s) for name, s in scoring.items()}
    return {str(name): check_scoring(estimator, scoring=name) for name in scoring}


def _off_pool(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a thread of its own (with this thread's context, so it finds the worker).

    The rank's thread already left the worker's thread pool; joblib's dask
    backend secedes (and later rejoins) any pool thread it runs in, which
    fails on a thread that is not in the pool any more.
    """
    context = contextvars.copy_context()
    with ThreadPoolExecutor(1, thread_name_prefix="airflowless-sklearn") as pool:
        return pool.submit(context.run, fn).result()


def _sklearn_loop(config: dict[str, Any]) -> None:
    from sklearn.base import clone

    estimator = clone(config["estimator"])
    if config["params"]:
        estimator.set_params(**config["params"])
    data = {name: features_and_label(get_dataset_shard(name), config["label_column"])
            for name in config["datasets"]}
    metrics = _off_pool(lambda: _fit_and_score(estimator, data, config))

    def save(folder: str) -> None:
        with open(os.path.join(folder, MODEL_FILE), "wb") as f:
            pickle.dump(estimator, f)

    report_model(metrics, save, config["preprocessor"])


def _fit_and_score(estimator: Any, data: dict[str, tuple[Any, Any]], config: dict[str, Any]) -> dict[str, Any]:
    import joblib
    import numpy as np
    from sklearn.base import clone
    from sklearn.model_selection import cross_validate

    x, y = data["train"]
    metrics: dict[str, Any] = {}
    with joblib.parallel_backend("dask"):
        start = time.perf_counter()
        estimator.fit(x, y)
        metrics["fit_time"] = time.perf_counter() - start
        if config["cv"] is not None:
            folds = cross_validate(clone(estimator), x, y, cv=config["cv"], scoring=config["scoring"],
                                   n_jobs=-1 if config["parallelize_cv"] else None)
            for key, values in folds.items():
                metrics[f"cv-{key}-mean"] = float(np.mean(values))
                metrics[f"cv-{key}-std"] = float(np.std(values))
    scorers = _scorers(estimator, config["scoring"])
    for name, (xs, ys) in data.items():
        for metric, scorer in scorers.items():
            metrics[f"{name}-{metric}"] = float(scorer(estimator, xs, ys))
    return metrics


def _runs_jobs(estimator: Any) -> bool:
    """Whether the estimator (or one nested in it) already parallelizes with ``n_jobs``."""
    return any(name.split("__")[-1] == "n_jobs" and value not in (None, 1)
               for name, value in estimator.get_params(deep=True).items())


class SklearnTrainer(BaseTrainer):
    """A scikit-learn estimator fitted on the whole ``train`` dataset by one rank.

    ``params`` are set on a clone of ``estimator``; ``scoring`` is a scorer
    name, a callable ``scorer(estimator, X, y)``, a list of names or a dict
    name -> scorer (None: ``estimator.score``); ``cv`` (folds or a splitter)
    adds cross-validation on ``train``, its folds run in parallel when
    ``parallelize_cv`` (None: when the estimator itself has no ``n_jobs``).
    ``num_workers`` must be 1: scikit-learn fits in one process, and its
    ``n_jobs`` parallelism runs as Dask tasks instead of more ranks.
    """

    def __init__(self, *, estimator: Any, label_column: str, datasets: dict[str, Any],
                 params: dict[str, Any] | None = None, scoring: Any = None, cv: Any = None,
                 parallelize_cv: bool | None = None, scaling_config: ScalingConfig | None = None,
                 run_config: RunConfig | None = None, preprocessor: Any = None,
                 metadata: dict[str, Any] | None = None) -> None:
        self.estimator = estimator
        self.label_column = label_column
        self.params = dict(params or {})
        self.scoring = scoring
        self.cv = cv
        self.parallelize_cv = parallelize_cv
        super().__init__(scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                         preprocessor=preprocessor, metadata=metadata)

    def _validate(self) -> None:
        super()._validate()
        if self.scaling_config.num_workers != 1:
            raise ConfigError(
                f"SklearnTrainer fits on exactly one rank, got ScalingConfig(num_workers="
                f"{self.scaling_config.num_workers}); use num_workers=1 — the estimator's n_jobs (and the "
                "folds of cv) already run as Dask tasks across the cluster")
        if not callable(getattr(self.estimator, "fit", None)) or not callable(getattr(self.estimator, "get_params",
                                                                                       None)):
            raise ConfigError(f"estimator must be a scikit-learn estimator (with fit and get_params), "
                              f"got {self.estimator!r}")
        if "train" not in self.datasets:
            raise ConfigError(f"SklearnTrainer needs datasets={{'train': ..., ...}}; "
                              f"got {sorted(self.datasets) or 'no datasets'}")
        if not isinstance(self.label_column, str) or not self.label_column:
            raise ConfigError(f"label_column must be a column name, got {self.label_column!r}")
        if not isinstance(self.params, dict):
            raise ConfigError(f"params must be a dict of estimator parameters, got {self.params!r}")
        if not (self.scoring is None or isinstance(self.scoring, (str, dict, list, tuple)) or callable(self.scoring)):
            raise ConfigError(f"scoring must be None, a scorer name, a callable, a list of names or a dict, "
                              f"got {self.scoring!r}")
        if self.parallelize_cv not in (None, True, False):
            raise ConfigError(f"parallelize_cv must be None, True or False, got {self.parallelize_cv!r}")

    def _loop(self) -> Callable[..., Any]:
        return _sklearn_loop

    def _loop_config(self, run: FitRun) -> dict[str, Any]:
        parallelize = self.parallelize_cv
        if parallelize is None:
            parallelize = self.cv is not None and not _runs_jobs(self.estimator)
        return {"estimator": self.estimator, "params": dict(self.params), "label_column": self.label_column,
                "scoring": self.scoring, "cv": self.cv, "parallelize_cv": parallelize,
                "datasets": list(self.datasets), "preprocessor": self.preprocessor}

    def _config_for_record(self) -> dict[str, Any]:
        return {**super()._config_for_record(), "estimator": type(self.estimator).__name__,
                "label_column": self.label_column, "params": self.params, "cv": repr(self.cv),
                "scoring": repr(self.scoring)}

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        """The fitted estimator saved in ``checkpoint``."""
        with checkpoint.as_directory() as folder, open(os.path.join(folder, MODEL_FILE), "rb") as f:
            return pickle.load(f)
