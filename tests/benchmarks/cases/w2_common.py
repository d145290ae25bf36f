"""Shared by the W2 cases: the same data, features, split and parameters for every system."""

import os

PATH = os.environ["TAXI_PATH"]
FEATURES = ["passenger_count", "trip_distance", "fare_amount", "trip_duration", "hour", "day_of_week"]
LABEL = "is_big_tip"
ROUNDS = 50
XGB_PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "tree_method": "hist",
              "max_depth": 6, "eta": 0.3}
LGB_PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "verbose": -1}
