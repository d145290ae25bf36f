"""TorchCheckpoint and TorchPredictor (Ray's): a module or its weights saved, loaded, and scoring offline and
behind HTTP on the session's cluster."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

from airflowless import data, serve
from airflowless.data.preprocessors import Concatenator
from airflowless.errors import ConfigError
from airflowless.train.checkpoint import Checkpoint
from tests.conftest import require_module

torch = require_module("torch")

from airflowless.train.torch import TorchCheckpoint, TorchPredictor  # noqa: E402

COLUMNS = ["a", "b", "c"]


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))


def _frame(rows: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(rows, 3)), columns=COLUMNS)
    return frame.assign(y=np.arange(rows))


def _expected(model: torch.nn.Module, frame: pd.DataFrame) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(frame[COLUMNS].to_numpy(np.float32, copy=True))).numpy()


def test_a_module_and_a_state_dict_come_back_with_their_preprocessor(tmp_path: Path) -> None:
    model, frame = _model(0), _frame()
    whole = TorchCheckpoint.from_model(model, preprocessor=Concatenator(COLUMNS, dtype="float32"))
    loaded = TorchCheckpoint.of(whole.path).get_model()
    np.testing.assert_array_equal(_expected(loaded, frame), _expected(model, frame))
    assert isinstance(whole.get_preprocessor(), Concatenator)
    with pytest.warns(UserWarning, match="not used"):
        assert whole.get_model(_model(1)) is not None

    weights = TorchCheckpoint.from_state_dict(model.state_dict())
    with pytest.raises(ConfigError, match=r"state dict.*get_model\(model="):
        weights.get_model()
    np.testing.assert_array_equal(_expected(weights.get_model(_model(1)), frame), _expected(model, frame))
    assert weights.get_preprocessor() is None
    with pytest.raises(ConfigError, match="has no model.pt"):
        TorchCheckpoint.of(Checkpoint.from_directory(tmp_path)).get_model()

    predictor = TorchPredictor.from_checkpoint(whole)
    out = predictor.predict(frame[COLUMNS])  # one column after the Concatenator: one tensor, in float32
    np.testing.assert_allclose(np.stack(out["predictions"]), _expected(model, frame), rtol=1e-6)
    double = TorchPredictor(model).predict({"x": list(frame[COLUMNS].to_numpy())}, dtype=torch.float32)
    np.testing.assert_allclose(np.stack(double["predictions"]), _expected(model, frame), rtol=1e-6)
    with pytest.raises(ConfigError, match=r"no column\(s\) \['nope'\]"):
        TorchPredictor(model, feature_columns=["nope"]).predict(frame)


class _TwoInputs(torch.nn.Module):
    """Several columns reach the model as a dict of tensors (as in Ray); a dict output is a column per key."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"total": inputs["a"] + inputs["b"], "first": inputs["a"]}


def test_several_columns_go_in_as_a_dict_and_a_dict_comes_out() -> None:
    out = TorchPredictor(_TwoInputs()).predict(pd.DataFrame({"a": [1.0, 2.0], "b": [10.0, 20.0]}))
    assert out.to_dict("list") == {"total": [11.0, 22.0], "first": [1.0, 2.0]}


@pytest.mark.usefixtures("cluster_client")
def test_batch_predictor_scores_a_dataset_with_a_state_dict_and_the_model_it_is_loaded_into() -> None:
    model, frame = _model(0), _frame()
    checkpoint = TorchCheckpoint.from_state_dict(model.state_dict(), preprocessor=Concatenator(COLUMNS))
    predictor = serve.BatchPredictor.from_checkpoint(checkpoint, TorchPredictor, model=_model(1),
                                                     feature_columns=["concat_out"])
    scored = predictor.predict(data.from_pandas([frame.iloc[:25], frame.iloc[25:]]), keep_columns=["y"]).to_pandas()
    scored = scored.sort_values("y")
    assert scored["y"].tolist() == list(range(40))
    np.testing.assert_allclose(np.stack(scored["predictions"]), _expected(model, frame), rtol=1e-6)


def test_a_deployment_answers_with_the_modules_predictions(serve_url: str) -> None:
    model, frame = _model(0), _frame(3)
    checkpoint = TorchCheckpoint.from_model(model, preprocessor=Concatenator(COLUMNS))
    serve.run(serve.PredictorDeployment.bind(TorchPredictor, checkpoint), name="torch", route_prefix="/torch")
    reply = httpx.post(f"{serve_url}/torch", json=frame[COLUMNS].to_dict("records"), timeout=30)
    assert reply.status_code == 200, reply.text
    np.testing.assert_allclose(reply.json()["predictions"], _expected(model, frame).tolist(), rtol=1e-6)
    serve.delete("torch")
