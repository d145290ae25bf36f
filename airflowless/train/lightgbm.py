"""LightGBMTrainer: distributed LightGBM through its socket network (``machines``).

Metrics are named ``<dataset>-<metric>`` with LightGBM's metric names
(``train-binary_logloss``, ``valid-binary_error``...). LightGBM scores a
dataset on the machine that holds it, without combining across machines, so
the scoring is shared out: rank 0 scores its own training rows (``train-*``
is rank 0's part), and each evaluation dataset goes whole to one other rank
(round robin over ranks 1..n-1), which scores all of its rows. Rank 0's report
gathers their metrics (``ReportGatherer``). With one rank, rank 0 scores all.
"""

from __future__ import annotations

import os
from typing import Any

from .backends.chatter import lightgbm_stdout_to_log
from .backends.lightgbm import LightGBMBackend
from .checkpoint import Checkpoint
from .context import get_checkpoint, get_context, get_dataset_shard
from .gbdt import GBDTTrainer, features_and_label, report_model

__all__ = ["LightGBMTrainer", "MODEL_FILE", "scoring_ranks"]

MODEL_FILE = "model.txt"


def scoring_ranks(datasets: list[str], world_size: int) -> dict[str, int]:
    """The rank that scores each evaluation dataset (all but ``train``): 1..n-1 in turn, 0 alone."""
    others = [name for name in datasets if name != "train"]
    return {name: 0 if world_size == 1 else 1 + i % (world_size - 1) for i, name in enumerate(others)}


def _lightgbm_loop(config: dict[str, Any]) -> None:
    import lightgbm as lgb

    from .context import _session

    network = getattr(_session(), "backend_info", {})
    rank, world = get_context().world_rank, get_context().world_size
    params = {"verbose": -1, **config["params"], "num_threads": config["nthread"]}
    if world > 1:
        params.update({"tree_learner": params.get("tree_learner", "data"), **network})
    x, y = features_and_label(get_dataset_shard("train"), config["label_column"])
    train_set = lgb.Dataset(x, label=y, free_raw_data=False)
    scorers: dict[str, int] = config["scoring_ranks"]
    valid_sets, valid_names = ([train_set], ["train"]) if rank == 0 else ([], [])
    for name in (n for n, r in scorers.items() if r == rank):
        xe, ye = features_and_label(get_dataset_shard(name), config["label_column"])
        valid_sets.append(lgb.Dataset(xe, label=ye, reference=train_set))
        valid_names.append(name)
    gather = sorted({r for r in scorers.values() if r != 0}) if rank == 0 else []
    restored = get_checkpoint()
    init_model = LightGBMTrainer.get_model(restored) if restored is not None else None
    done = init_model.current_iteration() if init_model is not None else 0
    total = config["num_boost_round"]
    frequency = config["checkpoint_frequency"]

    def report_round(env: Any) -> None:
        round_ = done + env.iteration - env.begin_iteration + 1
        metrics: dict[str, Any] = {f"{data}-{metric}": value for data, metric, value, _ in env.evaluation_result_list}
        metrics["boosting_round"] = round_
        if rank == 0 and (round_ == total or (frequency and round_ % frequency == 0)):
            report_model(metrics, lambda folder: env.model.save_model(os.path.join(folder, MODEL_FILE)),
                         config["preprocessor"], gather=gather)
        else:
            _session().report(metrics, gather=gather)

    if total - done > 0:
        # the network is up by the first round: until then LightGBM's own listener thread's lines are logged
        with lightgbm_stdout_to_log(active=world > 1) as network_up:
            lgb.train(params, train_set, num_boost_round=total - done, valid_sets=valid_sets, valid_names=valid_names,
                      init_model=init_model, callbacks=[lambda env: network_up(), report_round])


class LightGBMTrainer(GBDTTrainer):
    """LightGBM on ``num_workers`` ranks."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._backend = LightGBMBackend(timeout_s=self.timeout_s)

    def _loop(self) -> Any:
        return _lightgbm_loop

    def _loop_config(self) -> dict[str, Any]:
        return {**super()._loop_config(),
                "scoring_ranks": scoring_ranks(list(self.datasets), self.scaling_config.num_workers)}

    def _shards(self, client: Any, datasets: dict[str, Any], workers: list[str]) -> list[dict[str, Any]]:
        # The training rows are divided among the ranks; each evaluation dataset goes
        # whole to the rank that scores it (see the module's docstring).
        assigned = super()._shards(client, {"train": datasets["train"]}, workers)
        for name, rank in scoring_ranks(list(datasets), len(workers)).items():
            plan = datasets[name]
            assigned[rank][name] = (list(plan.blocks), sum(plan.rows))
        return assigned

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        """The ``lightgbm.Booster`` saved in ``checkpoint``."""
        import lightgbm as lgb

        with checkpoint.as_directory() as folder:
            return lgb.Booster(model_file=os.path.join(folder, MODEL_FILE))
