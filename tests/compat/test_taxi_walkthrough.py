"""The Ray AIR taxi walkthrough: parquet -> features -> split -> MinMaxScaler -> XGBoostTrainer -> Tuner
-> BatchPredictor -> PredictorDeployment, on a small synthetic taxi table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest

# Ray: from ray import data, serve, tune
from airflowless import data, serve, tune

# Ray: from ray.data.preprocessors import MinMaxScaler
from airflowless.data.preprocessors import MinMaxScaler

# (the walkthrough's own data and feature step, not Ray's)
from airflowless.datasets import add_features, make_taxi

# Ray: from ray.train.batch_predictor import BatchPredictor; from ray.serve import PredictorDeployment
from airflowless.serve import BatchPredictor, PredictorDeployment

# Ray: from ray.air.config import RunConfig, ScalingConfig
from airflowless.train import RunConfig, ScalingConfig

# Ray: from ray.train.xgboost import XGBoostTrainer
from airflowless.train.xgboost import XGBoostTrainer

LABEL = "is_big_tip"


@pytest.fixture
def served(cluster_client: object, home: Path) -> Iterator[None]:
    serve.start(http_options={"port": 0})
    yield
    serve.shutdown()


@pytest.mark.usefixtures("served")
def test_taxi_walkthrough(tmp_path: Path) -> None:
    make_taxi(6_000, n_files=3, path=tmp_path / "taxi", seed=0)

    # ---- the program, as in Ray's walkthrough ----
    dataset = data.read_parquet(str(tmp_path / "taxi"))
    dataset = dataset.map_batches(add_features, batch_format="pyarrow").drop_columns(
        ["pickup_ts", "dropoff_ts", "tip_amount"])
    train_dataset, valid_dataset = dataset.train_test_split(test_size=0.3, shuffle=True, seed=0)
    preprocessor = MinMaxScaler(columns=["trip_distance", "trip_duration"])
    trainer = XGBoostTrainer(
        label_column=LABEL,
        num_boost_round=20,
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": train_dataset, "valid": valid_dataset},
        preprocessor=preprocessor,
    )
    tuner = tune.Tuner(
        trainer,
        param_space={"params": {"max_depth": tune.randint(2, 6), "eta": tune.uniform(0.2, 0.4)}},
        tune_config=tune.TuneConfig(num_samples=2, metric="valid-logloss", mode="min", seed=0),
        run_config=RunConfig(name="compat_taxi"),
    )
    best = tuner.fit().get_best_result()

    predictor = BatchPredictor.from_checkpoint(best.checkpoint)
    scored = predictor.predict(valid_dataset, keep_columns=[LABEL]).to_pandas()

    serve.run(PredictorDeployment.bind(best.checkpoint), name="taxi", route_prefix="/taxi")
    rows = valid_dataset.drop_columns([LABEL]).take(5)
    response = httpx.post(f"{serve.http_address()}/taxi", json=rows, timeout=60)
    # ----------------------------------------------

    assert train_dataset.count() + len(scored) == len(pd.read_parquet(tmp_path / "taxi")) == 6_000
    majority = max(scored[LABEL].mean(), 1 - scored[LABEL].mean())
    accuracy = ((scored["predictions"] > 0.5) == scored[LABEL]).mean()
    assert accuracy > majority  # better than always guessing the majority class
    assert response.status_code == 200, response.text
    served = response.json()["predictions"]
    assert len(served) == 5 and all(0.0 <= p <= 1.0 for p in served)
