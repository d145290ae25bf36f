"""LightGBMTrainer: distributed LightGBM through its socket network (``machines``).

Metrics are named ``<dataset>-<metric>`` with LightGBM's metric names
(``train-binary_logloss``, ``valid-binary_error``...). LightGBM scores a
dataset on the machine that holds it, without combining across machines, so
the scoring is shared out: rank 0 scores its own training rows (``train-*``
is rank 0's part), and each evaluation dataset goes whole to one other rank
(round robin over ranks 1..n-1), which scores all of its rows. Rank 0's report
gathers their metrics (``ReportGatherer``). With one rank, rank 0 scores all.

A rank's ``lgb.Dataset`` s (its training rows and what it scores) stay on its
worker for the next trial of the experiment on the same prepared data whose
binning parameters (:func:`binning_params`) match, as XGBoost's matrices do
(:func:`.gbdt.shared_matrices`). LightGBM bins a Dataset once, inside the first
trial's ``train``, with that trial's parameters; the next trial's are checked
against them (LightGBM raises when a binning one changed, which the key rules
out) and its Booster takes only the Dataset's binning parameters from it, so no
other parameter of one trial reaches another. A run resumed from a checkpoint
builds its own: its Datasets carry the model's scores (``init_model``).
"""

from __future__ import annotations

import os
from typing import Any

from .backends.chatter import lightgbm_stdout_to_log
from .backends.lightgbm import LightGBMBackend
from .checkpoint import Checkpoint
from .context import _session, get_checkpoint, get_context, get_dataset_shard
from .gbdt import GBDTTrainer, features_and_label, frame_bytes, report_model, shared_matrices

__all__ = ["LightGBMTrainer", "MODEL_FILE", "binning_params", "scoring_ranks"]

MODEL_FILE = "model.txt"

# What a Dataset is binned with: the Dataset parameters LightGBM checks when a constructed Dataset is
# trained again (those of ``Dataset.get_params``), min_data_in_leaf (``feature_pre_filter``, on by
# default, drops features by it) and seed (it draws data_random_seed, the rows bins are found on).
BINNING_PARAMS = ("bin_construct_sample_cnt", "categorical_feature", "data_random_seed", "enable_bundle",
                  "feature_pre_filter", "forcedbins_filename", "group_column", "header", "ignore_column",
                  "is_enable_sparse", "label_column", "linear_tree", "max_bin", "max_bin_by_feature",
                  "min_data_in_bin", "min_data_in_leaf", "pre_partition", "precise_float_parser", "seed",
                  "two_round", "use_missing", "weight_column", "zero_as_missing")


def binning_params(params: dict[str, Any]) -> dict[str, str]:
    """The binning parameters in ``params`` (any of their aliases), by their main name."""
    from lightgbm.basic import _ConfigAliases  # LightGBM's own alias table

    return {name: repr(params[alias]) for name in BINNING_PARAMS
            for alias in sorted(_ConfigAliases.get(name)) if alias in params}


def scoring_ranks(datasets: list[str], world_size: int) -> dict[str, int]:
    """The rank that scores each evaluation dataset (all but ``train``): 1..n-1 in turn, 0 alone."""
    others = [name for name in datasets if name != "train"]
    return {name: 0 if world_size == 1 else 1 + i % (world_size - 1) for i, name in enumerate(others)}


def _lightgbm_loop(config: dict[str, Any]) -> None:
    import lightgbm as lgb

    network = getattr(_session(), "backend_info", {})
    rank, world = get_context().world_rank, get_context().world_size
    params = {"verbose": -1, **config["params"], "num_threads": config["nthread"]}
    if world > 1:
        params.update({"tree_learner": params.get("tree_learner", "data"), **network})
    scorers: dict[str, int] = config["scoring_ranks"]

    def build() -> tuple[tuple[Any, list[Any], list[str]], int]:
        x, y = features_and_label(get_dataset_shard("train"), config["label_column"])
        nbytes = frame_bytes(x)
        train_set = lgb.Dataset(x, label=y)
        valid_sets, valid_names = ([train_set], ["train"]) if rank == 0 else ([], [])
        for name in (n for n, r in scorers.items() if r == rank):
            xe, ye = features_and_label(get_dataset_shard(name), config["label_column"])
            nbytes += frame_bytes(xe)
            valid_sets.append(lgb.Dataset(xe, label=ye, reference=train_set))
            valid_names.append(name)
        return (train_set, valid_sets, valid_names), nbytes

    restored = get_checkpoint()
    train_set, valid_sets, valid_names = shared_matrices(
        config if restored is None else {**config, "prepared": None}, "lightgbm", binning_params(params), build,
        _all_ranks_have, ready=lambda found: all(d._handle is not None for d in [found[0], *found[1]]))  # binned
    gather = sorted({r for r in scorers.values() if r != 0}) if rank == 0 else []
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


def _all_ranks_have(have: bool) -> bool:
    """Whether every rank has its Datasets (LightGBM's network is not up yet: through the rendezvous)."""
    context = get_context()
    if context.world_size == 1:
        return have
    return all(_session().rendezvous.all_gather(context.world_rank, context.world_size, have, name="datasets"))


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
