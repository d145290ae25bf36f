"""W6's tune phase over LightGBMTrainer: data -> one fit -> a Tuner of W6_SAMPLES trials (one in flight).

The trials change only training parameters (learning_rate, num_leaves, lambda_l2), so each may train
on the Datasets the first one binned. Per trial: the tune phase's seconds over the trials.
W6_LGB_REUSE=0 measures the same code without that reuse: every rank's key gets a fresh nonce, so
each trial bins its own Datasets (the driver's prepared data is shared either way).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w6_airflowless import splits  # noqa: E402
from w6_common import LABEL, ROUNDS, SCALED, Phases  # noqa: E402

import airflowless  # noqa: E402
from airflowless import tune  # noqa: E402
from airflowless.data.preprocessors import MinMaxScaler  # noqa: E402
from airflowless.train import ScalingConfig, prepared  # noqa: E402
from airflowless.train.lightgbm import LightGBMTrainer  # noqa: E402
from airflowless.tune import TuneConfig, Tuner  # noqa: E402
from airflowless.tune.search.optuna import OptunaSearch  # noqa: E402

SAMPLES = int(os.environ.get("W6_SAMPLES", "4"))
LGB_PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "verbose": -1}


def setup():
    client = airflowless.init(quiet=True, dashboard_address=None)
    if os.environ.get("W6_LGB_REUSE", "1") == "0":
        client.run(_never_reuse)


def _never_reuse() -> None:
    import uuid

    from airflowless.train import lightgbm

    found = lightgbm.binning_params
    lightgbm.binning_params = lambda params: {**found(params), "nonce": uuid.uuid4().hex}


def run():
    phases = Phases()
    train, valid = splits()
    phases.done("data")
    trainer = LightGBMTrainer(label_column=LABEL, params=LGB_PARAMS, num_boost_round=ROUNDS,
                              scaling_config=ScalingConfig(num_workers=2), datasets={"train": train, "valid": valid},
                              preprocessor=MinMaxScaler(columns=SCALED))
    first = trainer.fit()
    phases.done("once")
    once = dict(trainer.last_fit_seconds)
    space = {"params": {"learning_rate": tune.uniform(0.05, 0.3), "num_leaves": tune.randint(15, 63),
                        "lambda_l2": tune.uniform(0.0, 1.0)}}
    grid = Tuner(trainer, param_space=space,
                 tune_config=TuneConfig(num_samples=SAMPLES, metric="valid-binary_logloss", mode="min",
                                        search_alg=OptunaSearch(seed=0), max_concurrent_trials=1)).fit()
    best = grid.get_best_result()
    phases.done("tune")
    workers = prepared.stats().get("workers", {}).values()
    return {**phases.seconds, "per_trial_s": phases.seconds["tune_s"] / SAMPLES,
            "best_valid_logloss": best.metrics["valid-binary_logloss"],
            "once_valid_logloss": first.metrics["valid-binary_logloss"],
            "once_rank0_data_s": once.get("rank0_data", 0.0), "once_rank0_training_s": once.get("rank0_training", 0.0),
            "datasets_reused": sum(w.get("hits", 0) for w in workers)}  # rank-trials that trained on kept ones


def teardown():
    airflowless.shutdown()
