"""BatchPredictor.from_checkpoint: the built-in scorer and a user's predictor class, on the real cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from airflowless import data, serve
from airflowless.errors import ConfigError
from airflowless.train.checkpoint import Checkpoint
from tests.serve.test_predictor import FEATURES, make_checkpoint

pytestmark = pytest.mark.usefixtures("cluster_client")


class Threshold:
    """A user's predictor: ``from_checkpoint(checkpoint, **kwargs)`` then ``predict(frame)``."""

    def __init__(self, cut: float, scale: float) -> None:
        self.cut, self.scale = cut, scale

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, *, scale: float) -> Threshold:
        with checkpoint.as_directory() as folder:
            return cls(float((Path(folder) / "cut.txt").read_text()), scale)

    def predict(self, frame: pd.DataFrame) -> Any:
        return (frame["trip_distance"] * self.scale > self.cut).astype(int).to_numpy()


def frame() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame(rng.normal(size=(200, 3)), columns=FEATURES).assign(row=range(200))


def test_from_checkpoint_with_the_built_in_scorer_matches_the_model(tmp_path: Path) -> None:
    import xgboost as xgb

    checkpoint, booster = make_checkpoint(tmp_path / "ckpt")
    rows = frame()
    scored = serve.BatchPredictor.from_checkpoint(checkpoint, serve.Predictor).predict(
        data.from_pandas(rows), keep_columns=["row"]).to_pandas().sort_values("row")
    doubled = rows.assign(trip_distance=rows["trip_distance"] * 2)  # the checkpoint's preprocessor
    expected = booster.predict(xgb.DMatrix(doubled[FEATURES]))
    assert np.allclose(scored["predictions"].to_numpy(), expected, atol=1e-6)


def test_from_checkpoint_with_a_predictor_class_and_its_arguments(tmp_path: Path) -> None:
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "cut.txt").write_text("0.5")
    rows = frame()
    scored = serve.BatchPredictor.from_checkpoint(Checkpoint.from_directory(folder), Threshold, scale=2.0).predict(
        data.from_pandas(rows), keep_columns=["row"]).to_pandas().sort_values("row")
    assert list(scored.columns) == ["row", "predictions"] and len(scored) == 200
    assert list(scored["predictions"]) == list((rows["trip_distance"] * 2 > 0.5).astype(int))


def test_arguments_without_a_predictor_class_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="predictor class"):
        serve.BatchPredictor.from_checkpoint(str(tmp_path), scale=2.0)
