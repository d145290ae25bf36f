"""The taxi pipeline: the seed walkthrough's big-tip model, as stages on the cluster.

Run it with ``airflowless run pipelines/taxi.py`` (or call ``taxi()`` in a
notebook): make the synthetic taxi data, read it with the feature step, split
it, look at it, and train an XGBoost model on two ranks with a MinMaxScaler
fitted on the training split. Datasets travel between stages as lazy plans;
the trained model travels as its checkpoint's path.
"""

from __future__ import annotations

from typing import Any

from airflowless import cluster_client, data, pipeline, stage
from airflowless.data.preprocessors import MinMaxScaler
from airflowless.datasets import add_features, make_taxi
from airflowless.train import RunConfig, ScalingConfig
from airflowless.train.xgboost import XGBoostTrainer

DROPPED = ["pickup_ts", "dropoff_ts", "tip_amount"]


@stage(cache=False)  # cheap to re-check: make_taxi keeps a marker of what it wrote
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
def fit(splits: dict[str, data.Dataset], num_workers: int, num_boost_round: int) -> dict[str, Any]:
    """XGBoost on ``num_workers`` ranks; returns the metrics and the checkpoint's path."""
    trainer = XGBoostTrainer(
        label_column="is_big_tip", num_boost_round=num_boost_round,
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        scaling_config=ScalingConfig(num_workers=num_workers),
        datasets={"train": splits["train"], "valid": splits["valid"]},
        preprocessor=MinMaxScaler(columns=["trip_distance", "trip_duration"]),
        run_config=RunConfig(name="taxi-xgboost"))
    result = trainer.fit()
    if result.error is not None:
        raise result.error
    assert result.checkpoint is not None
    return {"checkpoint": result.checkpoint.path,
            "metrics": {k: round(float(v), 4) for k, v in (result.metrics or {}).items()}}


@pipeline
def taxi(path: str = "data/taxi-s", n_rows: int = 200_000, n_files: int = 4, seed: int = 0,
         test_size: float = 0.3, num_workers: int = 2, num_boost_round: int = 50):
    """Make the taxi data at ``path``, look at it, and train the big-tip model."""
    splits = split(load(generate(path, n_rows, n_files, seed)), test_size, seed)
    return {"data": explore(splits), "model": fit(splits, num_workers, num_boost_round)}
