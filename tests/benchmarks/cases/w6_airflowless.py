"""W6 with airflowless: the seed walkthrough (Data -> XGBoostTrainer -> Tuner -> BatchPredictor -> serve)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import pyarrow.compute as pc  # noqa: E402
from w6_common import (LABEL, LAYOUT, PATH, ROUNDS, SAMPLES, SCALED, XGB_PARAMS, Phases,  # noqa: E402
                       feature_step, post_until_ok)

import airflowless  # noqa: E402
from airflowless import data, serve, tune  # noqa: E402
from airflowless.data.preprocessors import MinMaxScaler  # noqa: E402
from airflowless.train import ScalingConfig  # noqa: E402
from airflowless.train.xgboost import XGBoostTrainer  # noqa: E402
from airflowless.tune import TuneConfig, Tuner  # noqa: E402
from airflowless.tune.search.optuna import OptunaSearch  # noqa: E402


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def _train(table):
    return table.filter(pc.invert(table.column("_valid"))).drop_columns(["_valid"])


def _valid(table):
    return table.filter(table.column("_valid")).drop_columns(["_valid"])


def splits():
    """(train, valid): the feature step's rows, materialized once, split by the flag."""
    ds = data.read_parquet(PATH).map_batches(feature_step, batch_format="pyarrow").materialize()
    return ds.map_batches(_train, batch_format="pyarrow"), ds.map_batches(_valid, batch_format="pyarrow")


def run():
    phases = Phases()
    train, valid = splits()
    phases.done("data")

    trainer = XGBoostTrainer(label_column=LABEL, params=XGB_PARAMS, num_boost_round=ROUNDS,
                             scaling_config=ScalingConfig(num_workers=2),
                             datasets={"train": train, "valid": valid},
                             preprocessor=MinMaxScaler(columns=SCALED))
    once = trainer.fit()
    phases.done("once")
    fixed = dict(getattr(trainer, "last_fit_seconds", {}) or {})

    ranks, in_flight = (int(n) for n in LAYOUT.split("x"))
    space = {"params": {"eta": tune.uniform(0.2, 0.4), "max_depth": tune.randint(1, 6),
                        "min_child_weight": tune.uniform(0.8, 1.0)}}
    if ranks != 2:
        space["scaling_config"] = ScalingConfig(num_workers=ranks)
    grid = Tuner(trainer, param_space=space,
                 tune_config=TuneConfig(num_samples=SAMPLES, metric="valid-logloss", mode="min",
                                        search_alg=OptunaSearch(seed=0), max_concurrent_trials=in_flight)).fit()
    best = grid.get_best_result()
    phases.done("tune")

    scored = serve.BatchPredictor.from_checkpoint(best.checkpoint).predict(valid, keep_columns=[LABEL]).to_pandas()
    accuracy = float(((scored["predictions"] > 0.5) == scored[LABEL]).mean())
    phases.done("batch")

    serve.start(http_options={"port": 0})
    serve.run(serve.PredictorDeployment.bind(best.checkpoint), route_prefix="/predict")
    answer = post_until_ok(f"{serve.http_address()}/predict")
    assert "predictions" in answer, answer
    phases.done("serve")
    return {**phases.seconds, "best_valid_logloss": best.metrics["valid-logloss"], "accuracy": accuracy,
            "once_valid_logloss": once.metrics["valid-logloss"],
            **{f"fit_{k}": v for k, v in fixed.items()}}


def teardown():
    serve.shutdown()
    airflowless.shutdown()
