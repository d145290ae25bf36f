import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w2_common import FEATURES, LABEL, LGB_PARAMS, PATH, ROUNDS

from airflowless.datasets import add_features


def setup():
    pass


def run():
    import lightgbm as lgb
    import pyarrow.parquet as pq

    frame = add_features(pq.read_table(PATH)).to_pandas()[[*FEATURES, LABEL]]
    cut = int(round(len(frame) * 0.7))
    train, valid = frame.iloc[:cut], frame.iloc[cut:]
    dtrain = lgb.Dataset(train[FEATURES], train[LABEL])
    dvalid = lgb.Dataset(valid[FEATURES], valid[LABEL], reference=dtrain)
    history = {}
    lgb.train({**LGB_PARAMS, "num_threads": 2}, dtrain, ROUNDS, valid_sets=[dtrain, dvalid], valid_names=["train", "valid"],
              callbacks=[lgb.record_evaluation(history)])
    return {"valid_logloss": history["valid"]["binary_logloss"][-1]}
