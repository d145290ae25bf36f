"""What the gradient-boosting trainers share: the seed API, features from shards, checkpoints.

``XGBoostTrainer`` and ``LightGBMTrainer`` take ``label_column``, ``params``,
``num_boost_round`` and ``datasets`` (``"train"`` plus any others, evaluated
every round and reported as ``<dataset>-<metric>``). Each rank trains on its
shard through the framework's own distributed mode; rank 0 writes the model
and the fitted preprocessor into the checkpoint.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigError, TrainingDataError
from .checkpoint import Checkpoint
from .context import _session, get_context
from .trainer import BaseTrainer, FitRun

__all__ = ["GBDTTrainer", "features_and_label", "frame_bytes", "shared_matrices", "PREPROCESSOR_FILE",
           "load_preprocessor", "report_model"]

PREPROCESSOR_FILE = "preprocessor.pkl"


def features_and_label(shard: Any, label_column: str) -> tuple[Any, Any]:
    """(X as a pandas DataFrame of the feature columns, y) of a rank's shard."""
    table = shard.to_arrow()
    if label_column not in table.column_names:
        raise ConfigError(f"label_column {label_column!r} is not in dataset {shard.name!r}; "
                          f"its columns are {table.column_names}")
    frame = table.to_pandas()
    label = frame.pop(label_column)
    return frame.select_dtypes(exclude=["datetime", "datetimetz", "object"]), label


def frame_bytes(frame: Any) -> int:
    """The memory of a pandas DataFrame's columns (what a rank's matrices are counted as)."""
    return int(frame.memory_usage(index=False).sum())


def shared_matrices(config: dict[str, Any], kind: str, binning: dict[str, Any],
                    build: Callable[[], tuple[Any, int]], agree: Callable[[bool], bool],
                    ready: Callable[[Any], bool] = lambda found: True) -> Any:
    """What ``build()`` makes of this rank's shards (``(matrices, nbytes)``), kept on the worker for the
    next fit on the same prepared data, rank layout and ``binning`` parameters (:mod:`.prepared`).

    ``agree(have)`` is true when every rank has its matrices (a collective call all
    ranks make): a rank whose worker lost them makes every rank build again, as
    the frameworks compute their bins together. ``ready(found)``: whether kept
    matrices are complete (LightGBM bins a Dataset inside the first fit's
    ``train``, which may have failed before it did).
    """
    from .prepared import worker_matrices

    prepared = config.get("prepared")
    context = get_context()
    matrices = worker_matrices() if prepared else None
    key = (kind, prepared["layout"] if prepared else None, context.world_rank, context.world_size,
           config["label_column"], tuple(config["datasets"]), tuple(sorted(binning.items())))
    found = matrices.get(key) if matrices is not None else None
    if prepared and not agree(found is not None and ready(found)):
        found = None
    if found is None:
        began = time.perf_counter()
        found, nbytes = build()
        seconds = _session().seconds
        seconds["data"] = seconds.get("data", 0.0) + time.perf_counter() - began
        if matrices is not None and prepared:
            matrices.put(key, found, nbytes, prepared["entry"])
    return found


def save_preprocessor(folder: str, preprocessor: Any) -> None:
    if preprocessor is not None:
        import cloudpickle  # a BatchMapper may hold a lambda

        with open(os.path.join(folder, PREPROCESSOR_FILE), "wb") as f:
            cloudpickle.dump(preprocessor, f)


def load_preprocessor(checkpoint: Checkpoint) -> Any:
    """The preprocessor a trainer saved in ``checkpoint``, or None."""
    with checkpoint.as_directory() as folder:
        path = os.path.join(folder, PREPROCESSOR_FILE)
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            return pickle.load(f)


def report_model(metrics: dict[str, Any], save_model: Callable[[str], None], preprocessor: Any, *,
                 gather: Sequence[int] = ()) -> None:
    """Report ``metrics`` with a checkpoint of the model (``save_model(folder)``) and the preprocessor.

    The folder is temporary: ``report`` copies it to the run's storage.
    """
    with tempfile.TemporaryDirectory(prefix="airflowless-ckpt-") as folder:
        save_model(folder)
        save_preprocessor(folder, preprocessor)
        _session().report(metrics, Checkpoint.from_directory(folder), gather=gather)


_COLUMNS: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def _columns(plan: Any) -> list[str]:
    """The column names of a prepared plan: read from the cluster once per plan, as the trials of an
    experiment train on the same prepared plans (their blocks never change)."""
    from ..data import Dataset

    found = _COLUMNS.get(plan)
    if found is None:
        found = _COLUMNS[plan] = list(Dataset(plan).schema().names)
    return found


class GBDTTrainer(BaseTrainer):
    """The shared constructor and validation of the boosting trainers."""

    _default_rounds = 10
    _saves_itself = True

    def __init__(self, *, label_column: str, params: dict[str, Any] | None = None,
                 num_boost_round: int | None = None, checkpoint_frequency: int = 0,
                 timeout_s: float = 60.0, **kwargs: Any) -> None:
        self.label_column = label_column
        self.params = dict(params or {})
        self.num_boost_round = self._default_rounds if num_boost_round is None else num_boost_round
        self.checkpoint_frequency = checkpoint_frequency
        self.timeout_s = timeout_s
        super().__init__(**kwargs)

    def _validate(self) -> None:
        super()._validate()
        if "train" not in self.datasets:
            raise ConfigError(f"{type(self).__name__} needs datasets={{'train': ..., ...}}; "
                              f"got {sorted(self.datasets) or 'no datasets'}")
        if not isinstance(self.label_column, str) or not self.label_column:
            raise ConfigError(f"label_column must be a column name, got {self.label_column!r}")
        if not isinstance(self.num_boost_round, int) or self.num_boost_round < 1:
            raise ConfigError(f"num_boost_round must be an integer >= 1, got {self.num_boost_round!r}")
        if not isinstance(self.checkpoint_frequency, int) or self.checkpoint_frequency < 0:
            raise ConfigError(f"checkpoint_frequency must be an integer >= 0 (0: only at the end), "
                              f"got {self.checkpoint_frequency!r}")

    def _check_datasets(self, datasets: dict[str, Any]) -> None:
        for name, plan in datasets.items():
            if sum(plan.rows) == 0:
                raise TrainingDataError(
                    f"{type(self).__name__} got dataset {name!r} with no rows (after the preprocessor); "
                    f"expected at least one row for each of its {self.scaling_config.num_workers} rank(s): "
                    "give it more data")
            columns = _columns(plan)
            if self.label_column not in columns:
                raise TrainingDataError(f"label_column {self.label_column!r} is not in dataset {name!r}; "
                                        f"its columns are {columns}")

    def _check_shards(self, assigned: list[dict[str, tuple[list[Any], int]]]) -> None:
        for name in self.datasets:
            rows = {rank: shard[name][1] for rank, shard in enumerate(assigned) if name in shard}
            empty = sorted(rank for rank, count in rows.items() if count == 0)
            if empty:
                raise TrainingDataError(
                    f"{type(self).__name__} needs at least one row of dataset {name!r} on each of the "
                    f"{len(rows)} rank(s) that use it; got {sum(rows.values())} row(s) in all, none for "
                    f"rank(s) {empty}: give it more rows, or fewer ranks (ScalingConfig(num_workers=...))")

    def _loop_config(self, run: FitRun) -> dict[str, Any]:
        return {"label_column": self.label_column, "params": dict(self.params),
                "num_boost_round": self.num_boost_round,
                # Ray's place for it is RunConfig(checkpoint_config=CheckpointConfig(checkpoint_frequency=))
                "checkpoint_frequency": self.checkpoint_frequency
                or self.run_config.checkpoint_config.checkpoint_frequency,
                "datasets": list(self.datasets), "preprocessor": self.preprocessor,
                "nthread": max(1, int(self.scaling_config.rank_resources.get("CPU", 1))),
                "prepared": None if run.prepared_key is None or run.layout is None
                else {"entry": run.prepared_key, "layout": run.layout}}

    def _config_for_record(self) -> dict[str, Any]:
        return {**super()._config_for_record(), "label_column": self.label_column, "params": self.params,
                "num_boost_round": self.num_boost_round}
