"""LightGBMTrainer: distributed LightGBM through its socket network (``machines``).

Metrics are named ``<dataset>-<metric>`` with LightGBM's metric names
(``train-binary_logloss``, ``valid-binary_error``...). Evaluation datasets are
given whole to every rank (LightGBM does not combine metrics across ranks), so
their metrics cover all their rows; ``train-*`` metrics are rank 0's part.
"""

from __future__ import annotations

import os
from typing import Any

from .backends.lightgbm import LightGBMBackend
from .checkpoint import Checkpoint
from .context import get_checkpoint, get_context, get_dataset_shard, report
from .gbdt import GBDTTrainer, features_and_label, report_model

__all__ = ["LightGBMTrainer", "MODEL_FILE"]

MODEL_FILE = "model.txt"


def _lightgbm_loop(config: dict[str, Any]) -> None:
    import lightgbm as lgb

    from .context import _session

    network = getattr(_session(), "backend_info", {})
    world = get_context().world_size
    params = {"verbose": -1, **config["params"], "num_threads": config["nthread"]}
    if world > 1:
        params.update({"tree_learner": params.get("tree_learner", "data"), **network})
    x, y = features_and_label(get_dataset_shard("train"), config["label_column"])
    train_set = lgb.Dataset(x, label=y, free_raw_data=False)
    valid_sets, valid_names = [train_set], ["train"]
    # Evaluation is local to each machine in LightGBM (no collective), and only rank 0's
    # metrics are reported: only rank 0 builds and scores the (whole) evaluation sets.
    for name in config["datasets"] if get_context().world_rank == 0 else ():
        if name != "train":
            xe, ye = features_and_label(get_dataset_shard(name), config["label_column"])
            valid_sets.append(lgb.Dataset(xe, label=ye, reference=train_set))
            valid_names.append(name)
    restored = get_checkpoint()
    init_model = LightGBMTrainer.get_model(restored) if restored is not None else None
    done = init_model.current_iteration() if init_model is not None else 0
    total = config["num_boost_round"]
    frequency = config["checkpoint_frequency"]
    rank = get_context().world_rank

    def report_round(env: Any) -> None:
        round_ = done + env.iteration - env.begin_iteration + 1
        metrics: dict[str, Any] = {f"{data}-{metric}": value for data, metric, value, _ in env.evaluation_result_list}
        metrics["boosting_round"] = round_
        if rank == 0 and (round_ == total or (frequency and round_ % frequency == 0)):
            report_model(metrics, lambda folder: env.model.save_model(os.path.join(folder, MODEL_FILE)),
                         config["preprocessor"])
        else:
            report(metrics)

    if total - done > 0:
        lgb.train(params, train_set, num_boost_round=total - done, valid_sets=valid_sets, valid_names=valid_names,
                  init_model=init_model, callbacks=[report_round])


class LightGBMTrainer(GBDTTrainer):
    """LightGBM on ``num_workers`` ranks."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._backend = LightGBMBackend(timeout_s=self.timeout_s)

    def _loop(self) -> Any:
        return _lightgbm_loop

    def _shards(self, client: Any, datasets: dict[str, Any], workers: list[str]) -> list[dict[str, Any]]:
        # LightGBM computes a rank's metrics on that rank's rows only, without combining
        # them across ranks: every rank gets all of each evaluation dataset, so that the
        # reported <dataset>-<metric> covers the whole of it (train-* is rank 0's part).
        assigned = super()._shards(client, {"train": datasets["train"]}, workers)
        for name, plan in datasets.items():
            if name != "train":
                for shard in assigned:
                    shard[name] = (list(plan.blocks), sum(plan.rows))
        return assigned

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        """The ``lightgbm.Booster`` saved in ``checkpoint``."""
        import lightgbm as lgb

        with checkpoint.as_directory() as folder:
            return lgb.Booster(model_file=os.path.join(folder, MODEL_FILE))
