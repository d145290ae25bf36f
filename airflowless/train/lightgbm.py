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
The worker's budget counts them at their frames' size until they are binned,
then at what the binned Datasets hold (:func:`dataset_bytes`, a byte or two per
feature and row where the frame had up to eight).
"""

from __future__ import annotations

import os
from typing import Any

from .backends.chatter import lightgbm_stdout_to_log
from .backends.lightgbm import LightGBMBackend
from .checkpoint import Checkpoint
from .context import _session, get_checkpoint, get_context, get_dataset_shard
from .gbdt import GBDTTrainer, features_and_label, frame_bytes, report_model, shared_matrices
from .trainer import FitRun

__all__ = ["LightGBMTrainer", "MODEL_FILE", "binning_params", "dataset_bytes", "scoring_ranks"]

MODEL_FILE = "model.txt"

# What a Dataset is binned with: the Dataset parameters LightGBM checks when a constructed Dataset is
# trained again (those of ``Dataset.get_params``), min_data_in_leaf (``feature_pre_filter``, on by
# default, drops features by it) and seed (it draws data_random_seed, the rows bins are found on).
BINNING_PARAMS = ("bin_construct_sample_cnt", "categorical_feature", "data_random_seed", "enable_bundle",
                  "feature_pre_filter", "forcedbins_filename", "group_column", "header", "ignore_column",
                  "is_enable_sparse", "label_column", "linear_tree", "max_bin", "max_bin_by_feature",
                  "min_data_in_bin", "min_data_in_leaf", "pre_partition", "precise_float_parser", "seed",
                  "two_round", "use_missing", "weight_column", "zero_as_missing")


# What the trainer sets on every fit (the network differs from one fit to the next): no binning parameter.
PER_FIT_PARAMS = ("local_listen_port", "machines", "num_machines", "num_threads", "time_out", "tree_learner", "verbose")


def binning_params(params: dict[str, Any]) -> dict[str, str]:
    """The binning parameters in ``params`` (any of their aliases), by their main name.

    Without LightGBM's alias table (:func:`_param_aliases`), every parameter but those the trainer
    sets per fit: kept Datasets then serve only fits with the same parameters, never a wrong one."""
    aliases = _param_aliases()
    if aliases is None:
        return {name: repr(value) for name, value in sorted(params.items()) if name not in PER_FIT_PARAMS}
    return {name: repr(params[alias]) for name in BINNING_PARAMS
            for alias in sorted(aliases.get(name, [name])) if alias in params}


def _param_aliases() -> dict[str, list[str]] | None:
    """LightGBM's own table of parameter aliases (main name -> names), or None if this LightGBM has none.

    LightGBM's Python package has no public API for it: its library dumps it (``LGBM_DumpParamAliases``
    of the C API) and the private ``lightgbm.basic._ConfigAliases`` reads that; this is the one place
    airflowless reaches into it, with :func:`binning_params`'s fallback when it is gone or changed.
    """
    try:
        from lightgbm.basic import _ConfigAliases

        return {name: sorted(_ConfigAliases.get(name)) for name in BINNING_PARAMS}
    except Exception:  # renamed, moved or failing: the fallback is always right
        return None


def dataset_bytes(dataset: Any) -> int:
    """The memory of a binned (constructed) ``lgb.Dataset`` whose raw data is freed: a byte per row for each
    feature with up to 256 bins, two up to 65,536, four above (LightGBM's bins; a feature it dropped, as
    constant, has none), and the label twice as float32 (LightGBM's and the Python copy). Sparse or
    bundled features take less: the count is an upper bound, within 5% of what a dense Dataset holds
    (tests/train/test_lightgbm_datasets_cache.py measures it)."""
    bins = [dataset.feature_num_bin(i) for i in range(dataset.num_feature())]
    per_row = sum(0 if n == 0 else 1 if n <= 256 else 2 if n <= 65_536 else 4 for n in bins)
    return int(dataset.num_data()) * (per_row + 8)


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

    def build() -> tuple[tuple[Any, list[Any], list[str], dict[str, bool]], int]:
        # counted at the frames' size until LightGBM bins them and frees the frames (free_raw_data), then
        # at what the binned Datasets hold (_count_binned)
        x, y = features_and_label(get_dataset_shard("train"), config["label_column"])
        nbytes = frame_bytes(x)
        train_set = lgb.Dataset(x, label=y, free_raw_data=True)
        valid_sets, valid_names = ([train_set], ["train"]) if rank == 0 else ([], [])
        for name in (n for n, r in scorers.items() if r == rank):
            xe, ye = features_and_label(get_dataset_shard(name), config["label_column"])
            nbytes += frame_bytes(xe)
            valid_sets.append(lgb.Dataset(xe, label=ye, reference=train_set, free_raw_data=True))
            valid_names.append(name)
        return (train_set, valid_sets, valid_names, {"binned": False}), nbytes

    restored = get_checkpoint()
    kept = shared_matrices(config if restored is None else {**config, "prepared": None}, "lightgbm",
                           binning_params(params), build, _all_ranks_have, ready=lambda found: found[3]["binned"])
    train_set, valid_sets, valid_names, _ = kept
    gather = sorted({r for r in scorers.values() if r != 0}) if rank == 0 else []
    init_model = LightGBMTrainer.get_model(restored) if restored is not None else None
    done = init_model.current_iteration() if init_model is not None else 0
    total = config["num_boost_round"]
    frequency = config["checkpoint_frequency"]

    def report_round(env: Any) -> None:
        if not kept[3]["binned"]:  # the Booster is made: LightGBM has binned every Dataset it trains with
            _count_binned(kept)
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


def _count_binned(kept: tuple[Any, list[Any], list[str], dict[str, bool]]) -> None:
    """Mark a rank's Datasets binned (a next fit may train on them) and count them, if kept, at what they
    hold now. The rank's own thread does it, in the first round: the binning is over (no other thread
    reads a Dataset LightGBM is still building), the frames are freed."""
    from .prepared import worker_matrices

    kept[3]["binned"] = True
    matrices = worker_matrices()
    if matrices is not None:
        unique = {id(d): d for d in [kept[0], *kept[1]]}
        matrices.recount(kept, sum(dataset_bytes(d) for d in unique.values()))


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

    def _loop_config(self, run: FitRun) -> dict[str, Any]:
        return {**super()._loop_config(run),
                "scoring_ranks": scoring_ranks(list(self.datasets), self.scaling_config.num_workers)}

    def _shards(self, client: Any, datasets: dict[str, Any], workers: list[str], run: FitRun) -> list[dict[str, Any]]:
        # The training rows are divided among the ranks; each evaluation dataset goes
        # whole to the rank that scores it (see the module's docstring).
        assigned = super()._shards(client, {"train": datasets["train"]}, workers, run)
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
