"""XGBoostTrainer: distributed XGBoost through its own collective (tracker + communicator).

>>> from airflowless.data.preprocessors import MinMaxScaler
>>> from airflowless.train import ScalingConfig
>>> from airflowless.train.xgboost import XGBoostTrainer
>>> trainer = XGBoostTrainer(                                   # doctest: +SKIP
...     label_column="is_big_tip", num_boost_round=50,
...     params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
...     scaling_config=ScalingConfig(num_workers=2),
...     datasets={"train": train_ds, "valid": valid_ds},
...     preprocessor=MinMaxScaler(columns=["trip_distance", "trip_duration"]))
>>> result = trainer.fit()                                      # doctest: +SKIP
>>> result.metrics["valid-logloss"]                             # doctest: +SKIP
>>> booster = XGBoostTrainer.get_model(result.checkpoint)       # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

from .backends.xgboost import XGBoostBackend
from .checkpoint import Checkpoint
from .context import _session, get_checkpoint, get_context, get_dataset_shard, report
from .gbdt import GBDTTrainer, features_and_label, report_model, shared_matrices

__all__ = ["XGBoostTrainer", "MODEL_FILE", "matrix_bytes"]

MODEL_FILE = "model.ubj"


def _xgboost_loop(config: dict[str, Any]) -> None:
    import xgboost as xgb

    params = {"tree_method": "hist", **config["params"], "nthread": config["nthread"]}
    binning = {k: params.get(k) for k in ("tree_method", "max_bin", "missing", "enable_categorical")}

    def build() -> tuple[list[Any], int]:
        x, y = features_and_label(get_dataset_shard("train"), config["label_column"])
        # built with the rank's own CPUs (ranks share the machine), as it trains
        threads = params["nthread"]
        dtrain: xgb.DMatrix = (xgb.QuantileDMatrix(x, label=y, max_bin=params.get("max_bin"), nthread=threads)
                               if params["tree_method"] == "hist" else xgb.DMatrix(x, label=y, nthread=threads))
        built: list[tuple[xgb.DMatrix, str]] = [(dtrain, "train")]
        for name in config["datasets"]:
            if name != "train":
                xe, ye = features_and_label(get_dataset_shard(name), config["label_column"])
                built.append((xgb.DMatrix(xe, label=ye, nthread=threads), name))
        return built, sum(matrix_bytes(matrix, params.get("max_bin")) for matrix, _ in built)

    evals = shared_matrices(config, "xgboost", binning, build, _all_ranks_have)
    dtrain = evals[0][0]
    booster = None
    restored = get_checkpoint()
    if restored is not None:
        booster = XGBoostTrainer.get_model(restored)
    done = booster.num_boosted_rounds() if booster is not None else 0
    total = config["num_boost_round"]
    frequency = config["checkpoint_frequency"]
    rank = get_context().world_rank

    class Report(xgb.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            round_ = done + epoch + 1
            metrics = {f"{data}-{metric}": values[-1] for data, log in evals_log.items()
                       for metric, values in log.items()}
            metrics["boosting_round"] = round_
            if rank == 0 and (round_ == total or (frequency and round_ % frequency == 0)):
                report_model(metrics, lambda folder: model.save_model(os.path.join(folder, MODEL_FILE)),
                             config["preprocessor"])
            elif rank == 0:
                report(metrics)
            else:  # only rank 0's reports are kept: the others answer a stop request, and send nothing
                _session().report(metrics, send=False)
            return False

    if total - done > 0:
        xgb.train(params, dtrain, num_boost_round=total - done, evals=evals, xgb_model=booster,
                  callbacks=[Report()], verbose_eval=False)


def matrix_bytes(matrix: Any, max_bin: int | None = None) -> int:
    """The memory of an XGBoost ``DMatrix`` or ``QuantileDMatrix`` (what a rank's kept matrices count as).

    A DMatrix holds every present value as 8 bytes (its feature and value) and each row's offset (8) and
    label (4), whatever the frame's dtypes. A QuantileDMatrix holds each value's bin by row and by column
    (a byte up to 256 bins, XGBoost's default, two up to 65,536) and each row's offset and label; with
    values missing, its columns hold every cell and a bit saying whether it is missing, and present
    values 3 bytes more (fitted to measures). Within 15% of what malloc holds, a DMatrix within 1%
    (tests/train/test_prepared_cache.py); a float64 frame of the same rows is 3 to 4 times a dense
    QuantileDMatrix's size.
    """
    import xgboost as xgb

    rows, present = int(matrix.num_row()), int(matrix.num_nonmissing())
    if not isinstance(matrix, xgb.QuantileDMatrix):
        return present * 8 + rows * 12
    bins = 256 if max_bin is None else int(max_bin)
    per_bin = 1 if bins <= 256 else 2 if bins <= 65_536 else 4
    cells = rows * int(matrix.num_col())
    if present == cells:
        return present * 2 * per_bin + rows * 12
    return present * (per_bin + 3) + cells * per_bin + cells // 8 + rows * 12


def _all_ranks_have(have: bool) -> bool:
    """Whether every rank has its matrices: an all-reduce (minimum) in XGBoost's collective."""
    import numpy as np
    from xgboost import collective

    if get_context().world_size == 1:
        return have
    return bool(collective.allreduce(np.array([int(have)], dtype=np.int32), collective.Op.MIN)[0])


class XGBoostTrainer(GBDTTrainer):
    """XGBoost on ``num_workers`` ranks (the seed notebook's API)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._backend = XGBoostBackend(timeout_s=self.timeout_s)

    def _loop(self) -> Any:
        return _xgboost_loop

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        """The ``xgboost.Booster`` saved in ``checkpoint``."""
        import xgboost as xgb

        booster = xgb.Booster()
        with checkpoint.as_directory() as folder:
            booster.load_model(os.path.join(folder, MODEL_FILE))
        return booster
