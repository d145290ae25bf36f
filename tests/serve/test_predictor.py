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


class Linear:
    """A predictor class of the user's own, Ray's shape: ``from_checkpoint`` and ``predict(frame)``."""

    def __init__(self, weights: dict[str, float], offset: float) -> None:
        self.weights, self.offset = weights, offset

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, *, offset: float = 0.0) -> Linear:
        with checkpoint.as_directory() as folder:
            weights = pickle.loads((Path(folder) / "weights.pkl").read_bytes())
        return cls(weights, offset)

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        score = sum(frame[c] * w for c, w in self.weights.items()) + self.offset
        return pd.DataFrame({"score": score})


def values_adapter(body: dict[str, list[float]]) -> pd.DataFrame:
    """The HTTP adapter: ``{"a": [...], "b": [...]}`` columns to a frame."""
    return pd.DataFrame({"a": body["a"], "b": body["b"]})


def test_predictor_deployment_with_a_predictor_class_and_an_http_adapter(serve_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "linear"
    folder.mkdir()
    (folder / "weights.pkl").write_bytes(pickle.dumps({"a": 2.0, "b": -1.0}))
    checkpoint = Checkpoint.from_directory(folder)
    # Ray's argument order (class first), an adapter and the class's own keyword argument
    serve.run(serve.PredictorDeployment.bind(Linear, checkpoint, http_adapter=values_adapter, offset=0.5),
              name="linear", route_prefix="/linear")
    reply = httpx.post(f"{serve_url}/linear", json={"a": [1.0, 2.0], "b": [3.0, 0.0]})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"predictions": [2.0 - 3.0 + 0.5, 4.0 + 0.5]}
    bad = httpx.post(f"{serve_url}/linear", json={"a": [1.0]})  # the adapter's KeyError is the body's fault
    assert bad.status_code == 400 and "http_adapter" in bad.json()["error"]
    serve.delete("linear")
    # without an adapter, rows are JSON objects as for the built-in predictor
    serve.run(serve.PredictorDeployment.bind(checkpoint, Linear), name="rows", route_prefix="/rows")
    assert httpx.post(f"{serve_url}/rows", json=[{"a": 1.0, "b": 1.0}]).json() == {"predictions": [1.0]}
    serve.delete("rows")
