"""PredictorDeployment over an XGBoost checkpoint written as XGBoostTrainer writes it."""

from __future__ import annotations

import pickle
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from airflowless import serve
from airflowless.train.checkpoint import Checkpoint

FEATURES = ["trip_distance", "fare_amount", "hour"]


class Scale:
    """A stand-in preprocessor: doubles trip_distance (transform_batch on a DataFrame)."""

    def transform_batch(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(trip_distance=frame["trip_distance"] * 2)


def make_checkpoint(folder: Path) -> tuple[Checkpoint, object]:
    import xgboost as xgb

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(300, 3)), columns=FEATURES)
    label = (frame["trip_distance"] > 0).astype(int)
    booster = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(frame, label=label), num_boost_round=5)
    folder.mkdir()
    booster.save_model(str(folder / "model.ubj"))
    with open(folder / "preprocessor.pkl", "wb") as f:
        pickle.dump(Scale(), f)
    return Checkpoint.from_directory(folder), booster


def test_predictor_deployment_xgboost(serve_url: str, tmp_path: Path) -> None:
    import xgboost as xgb

    checkpoint, booster = make_checkpoint(tmp_path / "ckpt")
    serve.run(serve.PredictorDeployment.bind(checkpoint), name="xgb", route_prefix="/")
    row = {"trip_distance": 0.3, "fare_amount": 1.0, "hour": -0.5}
    expected = booster.predict(xgb.DMatrix(Scale().transform_batch(pd.DataFrame([row]))))  # type: ignore[attr-defined]
    one = httpx.post(f"{serve_url}/predict", json=row).json()["predictions"]
    assert np.allclose(one, expected, atol=1e-6)
    many = httpx.post(f"{serve_url}/predict", json=[row, {**row, "trip_distance": -3.0}]).json()["predictions"]
    assert len(many) == 2 and many[0] > 0.5 > many[1]
    missing = httpx.post(f"{serve_url}/predict", json={"trip_distance": 1.0})
    assert missing.status_code == 400
    assert "fare_amount" in missing.json()["error"] and "hour" in missing.json()["error"]
    no_input = httpx.post(f"{serve_url}/predict", json={"fare_amount": 1.0, "hour": 2})  # the preprocessor's
    assert no_input.status_code == 400 and "trip_distance" in no_input.json()["error"]
    for body in ([], "x", [1], {"trip_distance": [1]}, {**row, "hour": 10**400}, {**row, "hour": {"a": 1}},
                 [row, 5]):
        reply = httpx.post(f"{serve_url}/predict", json=body) if body != {**row, "hour": 10**400} else \
            httpx.post(f"{serve_url}/predict", content=b'{"trip_distance": 1, "fare_amount": 1, "hour": 1e999}')
        assert reply.status_code == 400, (body, reply.text)
    assert httpx.post(f"{serve_url}/predict", json={**row, "hour": "noon"}).status_code == 400
    serve.delete("xgb")
