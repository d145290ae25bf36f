"""PredictorDeployment over an XGBoost checkpoint written as XGBoostTrainer writes it."""

from __future__ import annotations

import pickle
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

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


def test_rows_of_numbers_score_as_an_array_and_match_the_dataframe_path(tmp_path: Path, recwarn: object) -> None:
    """The fast path (no DataFrame per batch) scores what the DataFrame path scores, without a warning."""
    import asyncio

    from sklearn.linear_model import LogisticRegression

    from airflowless.serve.predictor import Predictor

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(200, 3)), columns=FEATURES)
    model = LogisticRegression().fit(frame, frame["fare_amount"] > 0)
    folder = tmp_path / "sk"
    folder.mkdir()
    (folder / "model.pkl").write_bytes(pickle.dumps(model))
    predictor = Predictor(Checkpoint.from_directory(folder))
    rows = [{"hour": 1.5, "fare_amount": 2, "trip_distance": True, "extra": "ignored"},
            {"fare_amount": -3.0, "trip_distance": 0.1, "hour": 0}]  # keys in any order, a bool, an int
    assert predictor._numeric_rows(rows) is not None
    expected = model.predict(pd.DataFrame.from_records(rows)[FEATURES]).tolist()
    assert asyncio.run(predictor.predict(rows)) == {"predictions": expected}
    assert not [w for w in recwarn.list if "feature names" in str(w.message)]  # type: ignore[attr-defined]
    # a string takes the DataFrame path, which scores it as before
    text = [{**rows[0], "hour": "1.5"}]
    assert predictor._numeric_rows(text) is None
    assert predictor._score(text) == expected[:1]
    # null is NaN in both paths: this model refuses it, a 400 either way
    from airflowless.serve.errors import BadRequestError

    with pytest.raises(BadRequestError, match="could not score"):
        predictor._score([{**rows[1], "hour": None}])
    # feature columns in another order than the model was fitted with: never an array without names
    reordered = Predictor(Checkpoint.from_directory(folder), feature_columns=list(reversed(FEATURES)))
    assert reordered._numeric_rows(rows) is None
