import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from distributed import Client, LocalCluster  # noqa: E402
from w2_common import FEATURES, LABEL, PATH, ROUNDS, XGB_PARAMS  # noqa: E402

from airflowless.datasets import add_features  # noqa: E402

state = {}


def setup():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    state["cluster"], state["client"] = cluster, Client(cluster)


def _numbered(part, offsets, partition_info=None):
    start = offsets[partition_info["number"]]
    return part.assign(_row=range(start, start + len(part)))


def run():
    import dask.dataframe as dd
    import xgboost as xgb
    import xgboost.dask  # noqa: F401

    client = state["client"]
    frame = dd.read_parquet(PATH).map_partitions(add_features)[[*FEATURES, LABEL]].persist()
    # the last 30% of the rows (by position) validate, as for the other systems
    sizes = frame.map_partitions(len).compute().tolist()
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    cut = int(round(sum(sizes) * 0.7))
    numbered = frame.map_partitions(_numbered, offsets, meta={**frame.dtypes.to_dict(), "_row": "int64"})
    train, valid = numbered[numbered._row < cut], numbered[numbered._row >= cut]
    dtrain = xgb.dask.DaskQuantileDMatrix(client, train[FEATURES], train[LABEL])
    dvalid = xgb.dask.DaskDMatrix(client, valid[FEATURES], valid[LABEL])
    out = xgb.dask.train(client, {**XGB_PARAMS, "nthread": 1}, dtrain, num_boost_round=ROUNDS,
                         evals=[(dtrain, "train"), (dvalid, "valid")])
    return {"valid_logloss": out["history"]["valid"]["logloss"][-1]}


def teardown():
    state["client"].close()
    state["cluster"].close()
