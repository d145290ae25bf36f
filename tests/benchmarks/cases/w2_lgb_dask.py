import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from distributed import Client, LocalCluster
from w2_common import FEATURES, LABEL, LGB_PARAMS, PATH, ROUNDS
from w2_xgb_dask import _numbered

from airflowless.datasets import add_features

state = {}


def setup():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    state["cluster"], state["client"] = cluster, Client(cluster)


def run():
    import dask.dataframe as dd
    import lightgbm as lgb

    frame = dd.read_parquet(PATH).map_partitions(add_features)[[*FEATURES, LABEL]].persist()
    sizes = frame.map_partitions(len).compute().tolist()
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    cut = int(round(sum(sizes) * 0.7))
    numbered = frame.map_partitions(_numbered, offsets, meta={**frame.dtypes.to_dict(), "_row": "int64"})
    train, valid = numbered[numbered._row < cut], numbered[numbered._row >= cut]
    model = lgb.DaskLGBMClassifier(client=state["client"], n_estimators=ROUNDS, num_threads=1,
                                   **{k: v for k, v in LGB_PARAMS.items() if k != "objective"})
    # train and valid scored every round, as the airflowless trainer and the XGBoost cases do
    # (lightgbm.dask scores the training data in place when it is passed as an eval set)
    x, y = train[FEATURES], train[LABEL]
    model.fit(x, y, eval_set=[(x, y), (valid[FEATURES], valid[LABEL])], eval_names=["train", "valid"])
    return {"valid_logloss": model.evals_result_["valid"]["binary_logloss"][-1]}


def teardown():
    state["client"].close()
    state["cluster"].close()
