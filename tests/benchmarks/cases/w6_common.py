"""Shared by the W6 cases: the same data, feature step, split, parameters and search for every system."""

import json
import os
import time
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflowless.datasets import add_features

PATH = os.environ["TAXI_PATH"]
LAYOUT = os.environ.get("W6_LAYOUT", "2x1")  # ranks per trial x trials in flight
FEATURES = ["passenger_count", "trip_distance", "fare_amount", "trip_duration", "hour", "day_of_week"]
LABEL = "is_big_tip"
SCALED = ["trip_distance", "trip_duration"]
ROUNDS = 50
SAMPLES = 8
XGB_PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "tree_method": "hist",
              "max_depth": 6, "eta": 0.3, "max_bin": 256}
ROW = {"passenger_count": 1, "trip_distance": 2.5, "fare_amount": 12.0, "trip_duration": 900.0,
       "hour": 21, "day_of_week": 5}


def feature_step(table: pa.Table) -> pa.Table:
    """The feature step plus the split flag: a row validates when its pickup microsecond ends in 0-2."""
    table = add_features(table)
    micros = np.asarray(pc.cast(table.column("pickup_ts"), pa.int64()))
    return table.select([*FEATURES, LABEL]).append_column("_valid", pa.array(micros % 10 < 3))


def post_until_ok(url: str, timeout: float = 60.0) -> dict:
    """POST ROW to ``url`` until the first 200 answer; its JSON."""
    body = json.dumps(ROW).encode()
    deadline = time.monotonic() + timeout
    while True:
        try:
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as answer:
                if answer.status == 200:
                    return json.loads(answer.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


class Phases:
    """Seconds per phase, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[f"{name}_s"] = now - self._last
        self._last = now


def tune_configs() -> list[dict]:
    """The 8 configs W6's search asks for: Optuna's TPE (seed 0) samples its first 10 at random."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))
    configs = []
    for _ in range(SAMPLES):
        trial = study.ask()
        configs.append({"eta": trial.suggest_float("eta", 0.2, 0.4), "max_depth": trial.suggest_int("max_depth", 1, 5),
                        "min_child_weight": trial.suggest_float("min_child_weight", 0.8, 1.0)})
    return configs


def floor_rank(rank: int, args: dict, shards: tuple, out) -> None:  # noqa: ANN001
    """One of W6's floor processes: its matrices built once, then every tune config trained in
    XGBoost's collective; rank 0 puts (seconds, last valid logloss) per config on ``out``."""
    import xgboost as xgb
    from xgboost import collective

    (x, y), (xv, yv) = shards
    with collective.CommunicatorContext(**args):
        dtrain = xgb.QuantileDMatrix(x, label=y, max_bin=XGB_PARAMS["max_bin"], nthread=1)
        dvalid = xgb.DMatrix(xv, label=yv, nthread=1)
        for params in tune_configs():
            began, history = time.perf_counter(), {}
            xgb.train({**XGB_PARAMS, **params, "nthread": 1}, dtrain, num_boost_round=ROUNDS,
                      evals=[(dtrain, "train"), (dvalid, "valid")], evals_result=history, verbose_eval=False)
            if rank == 0:
                out.put((time.perf_counter() - began, history["valid"]["logloss"][-1]))
