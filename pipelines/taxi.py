"""The taxi pipeline: the seed walkthrough's big-tip model, as stages on the cluster.

Run it with ``airflowless run pipelines/taxi.py`` (or call ``taxi()`` in a
notebook): make the synthetic taxi data, read it with the feature step, split
it, look at it, tune an XGBoost model (two ranks per trial, a MinMaxScaler
fitted on the training split), score the validation split offline with the
best checkpoint, and serve it over HTTP. Datasets travel between stages as
lazy plans; the model travels as its checkpoint's path.
"""

from __future__ import annotations

import os
import time
from typing import Any

from airflowless import cluster_client, data, pipeline, serve, stage, tune
from airflowless.data.preprocessors import MinMaxScaler
from airflowless.datasets import FEATURE_COLUMNS, add_features, make_taxi
from airflowless.train import Checkpoint, RunConfig, ScalingConfig
from airflowless.train.xgboost import XGBoostTrainer

DROPPED = ["pickup_ts", "dropoff_ts", "tip_amount"]


def _made_from(path: str, n_rows: int, n_files: int, seed: int) -> tuple[Any, ...]:
    """What ``generate``'s output follows from: its parameters, not the files it writes under ``path``."""
    return os.path.abspath(path).encode(), n_rows, n_files, seed


@stage(cache=False, cache_key=_made_from)  # cheap to re-check: make_taxi keeps a marker of what it wrote
def generate(path: str, n_rows: int, n_files: int, seed: int) -> str:
    """Write the taxi table as parquet files, one Dask task per file."""
    with cluster_client() as client:
        def fan_out(fn: Any, *columns: Any) -> list[str]:
            return client.gather(client.map(fn, *columns, pure=False))

        make_taxi(n_rows, n_files=n_files, path=path, seed=seed, map_fn=fan_out)
    return path


@stage
def load(path: str) -> data.Dataset:
    """The raw table with the feature step applied (lazy: nothing is read yet)."""
    return data.read_parquet(path).map_batches(add_features, batch_format="pyarrow").drop_columns(DROPPED)


@stage
def split(ds: data.Dataset, test_size: float, seed: int) -> dict[str, data.Dataset]:
    train, valid = ds.train_test_split(test_size=test_size, shuffle=True, seed=seed)
    return {"train": train, "valid": valid}


@stage
def explore(splits: dict[str, data.Dataset]) -> dict[str, Any]:
    """Row counts and the mean fare by passenger count (the walkthrough's first look)."""
    with cluster_client():
        fares = splits["train"].groupby("passenger_count").mean("fare_amount").to_pandas()
        return {
            "train_rows": splits["train"].count(),
            "valid_rows": splits["valid"].count(),
            "mean_fare_by_passengers": {int(k): round(float(v), 3) for k, v in
                                        zip(fares["passenger_count"], fares["mean(fare_amount)"], strict=True)},
        }


@stage(retries=1)
def fit(splits: dict[str, data.Dataset], num_workers: int, num_boost_round: int, num_samples: int) -> dict[str, Any]:
    """Tune eta, max_depth and min_child_weight of the seed's XGBoostTrainer; the best trial's checkpoint."""
    trainer = XGBoostTrainer(
        label_column="is_big_tip", num_boost_round=num_boost_round,
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        scaling_config=ScalingConfig(num_workers=num_workers),
        datasets={"train": splits["train"], "valid": splits["valid"]},
        preprocessor=MinMaxScaler(columns=["trip_distance", "trip_duration"]))
    grid = tune.Tuner(
        trainer,
        param_space={"params": {"eta": tune.uniform(0.2, 0.4), "max_depth": tune.randint(1, 6),
                                "min_child_weight": tune.uniform(0.8, 1.0)}},
        tune_config=tune.TuneConfig(num_samples=num_samples, metric="valid-logloss", mode="min", seed=0),
        run_config=RunConfig(name=f"taxi-tune-{time.strftime('%Y%m%d-%H%M%S')}")).fit()
    best = grid.get_best_result()
    assert best.checkpoint is not None
    return {"checkpoint": best.checkpoint.path, "config": best.config["params"], "trials": len(grid),
            "errors": grid.num_errors,
            "metrics": {k: round(float(v), 4) for k, v in (best.metrics or {}).items()  # the model's own
                        if k.startswith(("train-", "valid-"))}}


@stage
def batch_predict(splits: dict[str, data.Dataset], model: dict[str, Any]) -> dict[str, Any]:
    """Score the validation split offline with the best checkpoint (one model per worker process)."""
    with cluster_client():
        scored = serve.BatchPredictor(model["checkpoint"]).predict(splits["valid"], keep_columns=["is_big_tip"])
        frame = scored.to_pandas()
    accuracy = float(((frame["predictions"] > 0.5) == frame["is_big_tip"]).mean())
    return {"rows": len(frame), "accuracy": round(accuracy, 4)}


@stage(cache=False)  # its effect is a server, not its return value: a cached URL would answer nobody
def deploy(model: dict[str, Any], port: int, serve_seconds: float) -> dict[str, Any]:
    """Serve the best model at POST /predict, check it answers, keep it up for ``serve_seconds``."""
    import httpx

    with cluster_client():
        serve.start(http_options={"port": port})
        serve.run(serve.PredictorDeployment.bind(Checkpoint(model["checkpoint"])), name="taxi",
                  route_prefix="/predict")
        url = f"{serve.http_address()}/predict"
        row = {"passenger_count": 1, "trip_distance": 2.4, "fare_amount": 12.5, "trip_duration": 840.0,
               "hour": 22, "day_of_week": 5, "payment_type": 1}
        assert set(FEATURE_COLUMNS) <= set(row)
        response = httpx.post(url, json=[row, {**row, "hour": 9, "day_of_week": 1}], timeout=30,
                              verify=serve.http_client_ssl() or True)  # the cluster's CA when it runs on TLS
        if response.status_code != 200:
            raise RuntimeError(f"the served model answered {response.status_code}: {response.text}")
        answer = response.json()
        time.sleep(serve_seconds)
        serve.shutdown()
    return {"url": url, "predictions": [round(p, 4) for p in answer["predictions"]]}


@pipeline
def taxi(path: str = "data/taxi-s", n_rows: int = 200_000, n_files: int = 4, seed: int = 0,
         test_size: float = 0.3, num_workers: int = 2, num_boost_round: int = 50, num_samples: int = 4,
         port: int = 0, serve_seconds: float = 0.0):
    """Make the taxi data at ``path``, look at it, tune and train the big-tip model, score and serve it."""
    splits = split(load(generate(path, n_rows, n_files, seed)), test_size, seed)
    model = fit(splits, num_workers, num_boost_round, num_samples)
    return {"data": explore(splits), "model": model, "offline": batch_predict(splits, model),
            "served": deploy(model, port, serve_seconds)}
