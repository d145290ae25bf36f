"""W6 hand-written with Dask: dask.dataframe + xgboost.dask + Optuna + a uvicorn/Starlette server."""

import os
import pickle
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from distributed import Client, LocalCluster  # noqa: E402
from w6_common import (FEATURES, LABEL, PATH, ROUNDS, SAMPLES, SCALED, XGB_PARAMS, Phases,  # noqa: E402
                       feature_step, post_until_ok)

state = {}


def setup():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    state["cluster"], state["client"] = cluster, Client(cluster)


def _features(part):
    import pyarrow as pa

    return feature_step(pa.Table.from_pandas(part, preserve_index=False)).to_pandas()


def _scale(part, scaler):
    part = part.copy()
    part[SCALED] = scaler.transform(part[SCALED])
    return part


def _correct(part, booster):
    import pandas as pd

    predictions = booster.inplace_predict(part[FEATURES])
    return pd.DataFrame({"correct": [int(((predictions > 0.5) == part[LABEL].to_numpy()).sum())],
                         "rows": [len(part)]})


def run():
    import dask
    import dask.dataframe as dd
    import numpy as np
    import optuna
    import xgboost as xgb
    import xgboost.dask  # noqa: F401
    from sklearn.preprocessing import MinMaxScaler

    client = state["client"]
    phases = Phases()
    frame = dd.read_parquet(PATH).map_partitions(_features)
    train = frame[~frame["_valid"]][[*FEATURES, LABEL]].persist()
    valid = frame[frame["_valid"]][[*FEATURES, LABEL]].persist()
    low, high = dask.compute(train[SCALED].min(), train[SCALED].max())
    scaler = MinMaxScaler().fit(np.vstack([low.to_numpy(), high.to_numpy()]))
    train = train.map_partitions(_scale, scaler).persist()
    valid = valid.map_partitions(_scale, scaler).persist()
    dtrain = xgb.dask.DaskQuantileDMatrix(client, train[FEATURES], train[LABEL], max_bin=XGB_PARAMS["max_bin"])
    dvalid = xgb.dask.DaskQuantileDMatrix(client, valid[FEATURES], valid[LABEL], ref=dtrain,
                                          max_bin=XGB_PARAMS["max_bin"])
    phases.done("data")

    def fit(params):
        out = xgb.dask.train(client, {**XGB_PARAMS, **params, "nthread": 1}, dtrain, num_boost_round=ROUNDS,
                             evals=[(dtrain, "train"), (dvalid, "valid")])
        return out["booster"], out["history"]["valid"]["logloss"][-1]

    _, once_logloss = fit({})
    phases.done("once")

    found = {}

    def objective(trial):
        booster, logloss = fit({"eta": trial.suggest_float("eta", 0.2, 0.4),
                                "max_depth": trial.suggest_int("max_depth", 1, 5),
                                "min_child_weight": trial.suggest_float("min_child_weight", 0.8, 1.0)})
        if not found or logloss < found["logloss"]:
            found.update(booster=booster, logloss=logloss)
        return logloss

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(objective, n_trials=SAMPLES)
    phases.done("tune")

    counts = valid.map_partitions(_correct, found["booster"], meta={"correct": "i8", "rows": "i8"}).sum().compute()
    accuracy = float(counts["correct"] / counts["rows"])
    phases.done("batch")

    folder = state["folder"] = tempfile.mkdtemp(prefix="w6-dask-")
    found["booster"].save_model(os.path.join(folder, "model.ubj"))
    with open(os.path.join(folder, "scaler.pkl"), "wb") as f:
        pickle.dump(scaler, f)
    port = 18000 + os.getpid() % 1000
    state["server"] = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "w6_serve_app:app", "--port", str(port), "--log-level", "warning"],
        cwd=os.path.dirname(__file__), env={**os.environ, "W6_MODEL_DIR": folder})
    answer = post_until_ok(f"http://127.0.0.1:{port}/predict")
    assert "predictions" in answer, answer
    phases.done("serve")
    return {**phases.seconds, "best_valid_logloss": study.best_value, "accuracy": accuracy,
            "once_valid_logloss": once_logloss}


def teardown():
    state["server"].terminate()
    state["server"].wait()
    state["client"].close()
    state["cluster"].close()
