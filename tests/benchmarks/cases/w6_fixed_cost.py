"""W6 part 3: one XGBoostTrainer fit on prepared data against xgboost.dask's own train, same workers.

Both run on the cluster airflowless.init starts, alternating, after a warm-up of
each: the trainer on data its fits already prepared (materialized, scaled, its
matrices kept), xgboost.dask.train on persisted dask DataFrames (it builds its
DMatrix in every call). The trainer's wall time is broken into its phases.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import pyarrow.compute as pc  # noqa: E402
from w6_common import FEATURES, LABEL, PATH, ROUNDS, SCALED, XGB_PARAMS, feature_step  # noqa: E402

import airflowless  # noqa: E402
from airflowless import data  # noqa: E402
from airflowless.data.preprocessors import MinMaxScaler  # noqa: E402
from airflowless.train import ScalingConfig  # noqa: E402
from airflowless.train.xgboost import XGBoostTrainer  # noqa: E402

REPEATS = int(os.environ.get("W6_FIT_REPEATS", "3"))
state = {}


def _train(table):
    return table.filter(pc.invert(table.column("_valid"))).drop_columns(["_valid"])


def _valid(table):
    return table.filter(table.column("_valid")).drop_columns(["_valid"])


def setup():
    import dask.dataframe as dd
    import pyarrow as pa
    from distributed import get_client

    airflowless.init(quiet=True, dashboard_address=None)
    client = state["client"] = get_client()
    ds = data.read_parquet(PATH).map_batches(feature_step, batch_format="pyarrow").materialize()
    state["trainer"] = XGBoostTrainer(
        label_column=LABEL, params=XGB_PARAMS, num_boost_round=ROUNDS, scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": ds.map_batches(_train, batch_format="pyarrow"),
                  "valid": ds.map_batches(_valid, batch_format="pyarrow")},
        preprocessor=MinMaxScaler(columns=SCALED))
    frame = dd.read_parquet(PATH).map_partitions(
        lambda part: feature_step(pa.Table.from_pandas(part, preserve_index=False)).to_pandas())
    low, high = client.compute([frame[~frame._valid][SCALED].min(), frame[~frame._valid][SCALED].max()], sync=True)

    def scale(part):
        part = part.copy()
        part[SCALED] = (part[SCALED] - low) / (high - low)
        return part

    state["train"] = frame[~frame._valid][[*FEATURES, LABEL]].map_partitions(scale).persist()
    state["valid"] = frame[frame._valid][[*FEATURES, LABEL]].map_partitions(scale).persist()
    _fit(), _dask_train()  # warm-up: imports, the trainer's prepared data and matrices


def _fit():
    began = time.perf_counter()
    result = state["trainer"].fit()
    return time.perf_counter() - began, result.metrics["valid-logloss"], dict(state["trainer"].last_fit_seconds)


def _dask_train():
    import xgboost as xgb
    import xgboost.dask  # noqa: F401

    client, train, valid = state["client"], state["train"], state["valid"]
    began = time.perf_counter()
    dtrain = xgb.dask.DaskQuantileDMatrix(client, train[FEATURES], train[LABEL], max_bin=XGB_PARAMS["max_bin"])
    dvalid = xgb.dask.DaskQuantileDMatrix(client, valid[FEATURES], valid[LABEL], ref=dtrain,
                                          max_bin=XGB_PARAMS["max_bin"])
    out = xgb.dask.train(client, {**XGB_PARAMS, "nthread": 1}, dtrain, num_boost_round=ROUNDS,
                         evals=[(dtrain, "train"), (dvalid, "valid")])
    return time.perf_counter() - began, out["history"]["valid"]["logloss"][-1]


def run():
    fits, trains, phases = [], [], []
    for _ in range(REPEATS):
        took, fit_logloss, seconds = _fit()
        fits.append(took)
        phases.append(seconds)
        took, dask_logloss = _dask_train()
        trains.append(took)
    figures = {"fit_s": statistics.median(fits), "dask_train_s": statistics.median(trains),
               "fit_valid_logloss": fit_logloss, "dask_valid_logloss": dask_logloss}
    for key in sorted({k for p in phases for k in p}):
        figures[f"phase_{key}"] = statistics.median(p.get(key, 0.0) for p in phases)
    return figures


def teardown():
    airflowless.shutdown()
