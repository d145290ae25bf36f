import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import airflowless  # noqa: E402
from airflowless import data  # noqa: E402
from airflowless.datasets import add_features  # noqa: E402
from airflowless.train import ScalingConfig  # noqa: E402
from airflowless.train.xgboost import XGBoostTrainer  # noqa: E402
from w2_common import FEATURES, LABEL, PATH, ROUNDS, XGB_PARAMS  # noqa: E402


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def run():
    ds = data.read_parquet(PATH).map_batches(add_features, batch_format="pyarrow").select_columns([*FEATURES, LABEL])
    train, valid = ds.train_test_split(test_size=0.3)
    result = XGBoostTrainer(label_column=LABEL, params=XGB_PARAMS, num_boost_round=ROUNDS,
                            scaling_config=ScalingConfig(num_workers=2),
                            datasets={"train": train, "valid": valid}).fit()
    assert result.error is None, result.error
    return {"valid_logloss": result.metrics["valid-logloss"]}


def teardown():
    airflowless.shutdown()
