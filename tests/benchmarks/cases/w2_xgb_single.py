import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w2_common import FEATURES, LABEL, PATH, ROUNDS, XGB_PARAMS  # noqa: E402

from airflowless.datasets import add_features  # noqa: E402


def setup():
    pass


def run():
    import pyarrow.parquet as pq
    import xgboost as xgb

    frame = add_features(pq.read_table(PATH)).to_pandas()[[*FEATURES, LABEL]]
    cut = int(round(len(frame) * 0.7))
    train, valid = frame.iloc[:cut], frame.iloc[cut:]
    dtrain = xgb.QuantileDMatrix(train[FEATURES], train[LABEL])
    dvalid = xgb.DMatrix(valid[FEATURES], valid[LABEL])
    history = {}
    xgb.train({**XGB_PARAMS, "nthread": 2}, dtrain, ROUNDS, evals=[(dtrain, "train"), (dvalid, "valid")],
              evals_result=history, verbose_eval=False)
    return {"valid_logloss": history["valid"]["logloss"][-1]}
