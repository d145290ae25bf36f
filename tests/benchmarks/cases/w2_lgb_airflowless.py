import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w2_common import FEATURES, LABEL, LGB_PARAMS, PATH, ROUNDS

import airflowless
from airflowless import data
from airflowless.datasets import add_features
from airflowless.train import ScalingConfig
from airflowless.train.lightgbm import LightGBMTrainer


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def run():
    ds = data.read_parquet(PATH).map_batches(add_features, batch_format="pyarrow").select_columns([*FEATURES, LABEL])
    train, valid = ds.train_test_split(test_size=0.3)
    result = LightGBMTrainer(label_column=LABEL, params=LGB_PARAMS, num_boost_round=ROUNDS,
                             scaling_config=ScalingConfig(num_workers=2),
                             datasets={"train": train, "valid": valid}).fit()
    assert result.error is None, result.error
    return {"valid_logloss": result.metrics["valid-binary_logloss"]}


def teardown():
    airflowless.shutdown()
