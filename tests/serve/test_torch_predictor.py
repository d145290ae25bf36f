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
        np.testing.assert_array_equal(_expected(whole.get_model(_model(1)), frame), _expected(model, frame))

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
    array = TorchPredictor(model).predict(frame[COLUMNS].to_numpy())  # float64 rows in the model's float32
    np.testing.assert_allclose(np.stack(array["predictions"]), _expected(model, frame), rtol=1e-6)
    with pytest.raises(ConfigError, match=r"no column\(s\) \['nope'\]"):
        TorchPredictor(model, feature_columns=["nope"]).predict(frame)
    assert TorchPredictor.from_checkpoint(whole).predict(frame.iloc[:0]).columns.tolist() == ["predictions"]


def test_a_wrapped_module_a_prefixed_state_dict_and_a_class_of_the_script_are_saved_as_loadable() -> None:
    model, frame = _model(0), _frame()
    unwrapped = TorchCheckpoint.from_model(torch.nn.DataParallel(model)).get_model()  # DDP's case, on CPU
    assert isinstance(unwrapped, torch.nn.Sequential)
    prefixed = {f"module.{k}": v for k, v in model.state_dict().items()}  # what a DDP-wrapped model's dict holds
    loaded = TorchCheckpoint.from_state_dict(prefixed).get_model(_model(1))
    np.testing.assert_array_equal(_expected(loaded, frame), _expected(model, frame))
    assert all(k.startswith("module.") for k in prefixed)  # the caller's dict is left alone

    class Local(torch.nn.Module):  # defined where it trains: saved by value, as a script's or a notebook's class
        def __init__(self) -> None:
            super().__init__()
            self.scale = torch.nn.Parameter(torch.tensor(2.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.scale

    got = TorchPredictor.from_checkpoint(TorchCheckpoint.from_model(Local())).predict({"x": [1.0, 2.5]})
    assert got["predictions"].tolist() == [2.0, 5.0]


class _Identity(torch.nn.Module):
    """No parameters: inputs keep their dtype unless told."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_inputs_take_the_dtype_asked_and_outputs_become_columns_or_clear_errors() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0]})
    assert TorchPredictor(_Identity()).predict(frame)["predictions"].dtype == np.float64
    assert TorchPredictor(_Identity(), dtype=torch.float16).predict(frame)["predictions"].dtype == np.float16
    assert TorchPredictor(_Identity()).predict(frame, dtype={"x": torch.int32})["predictions"].dtype == np.int32
    assert TorchPredictor(_model(0).to(torch.bfloat16)).predict(  # numpy has no bfloat16: floats come back
        pd.DataFrame({"v": list(np.ones((2, 3), np.float32))}))["predictions"][0].dtype == np.float32
    with pytest.raises(ConfigError, match=r"column 'v' does not make a tensor.*shapes \[\(2,\), \(3,\)\]"):
        TorchPredictor(_model(0)).predict(pd.DataFrame({"v": [np.ones(3), np.ones(2)]}))

    class Pair(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, x

    with pytest.raises(ConfigError, match="returned a tuple.*override call_model"):
        TorchPredictor(Pair()).predict(frame)

    class First(TorchPredictor):
        def call_model(self, inputs: torch.Tensor) -> torch.Tensor:
            return self.model(inputs)[0]

    assert First(Pair()).predict(frame)["predictions"].tolist() == [1.0, 2.0]


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
    # JSON integers make an integer column: dtype asks for the model's floats; "id" only passes through
    app = serve.PredictorDeployment.bind(TorchPredictor, checkpoint, feature_columns=["concat_out"],
                                         dtype=torch.float32)
    serve.run(app, name="torch", route_prefix="/torch")
    try:
        rows = [{**row, "id": i} for i, row in enumerate(frame[COLUMNS].to_dict("records"))]
        reply = httpx.post(f"{serve_url}/torch", json=rows, timeout=30)
        assert reply.status_code == 200, reply.text
        np.testing.assert_allclose(reply.json()["predictions"], _expected(model, frame).tolist(), rtol=1e-6)
        whole = {"a": 1, "b": 2, "c": 3, "id": 9}
        reply = httpx.post(f"{serve_url}/torch", json=whole, timeout=30)
        assert reply.status_code == 200, reply.text
        expected = _expected(model, pd.DataFrame([whole]).astype(float))
        np.testing.assert_allclose(reply.json()["predictions"], expected.tolist(), rtol=1e-6)
    finally:
        serve.delete("torch")


def _report_a_module(config: dict[str, object]) -> None:
    from airflowless import train

    checkpoint = TorchCheckpoint.from_model(_model(0))
    train.report({"folder": checkpoint.path}, checkpoint=checkpoint)


@pytest.mark.usefixtures("cluster_client", "home")
def test_a_reported_torch_checkpoint_leaves_no_temporary_folder() -> None:
    from airflowless.train import DataParallelTrainer, ScalingConfig

    result = DataParallelTrainer(_report_a_module, scaling_config=ScalingConfig(num_workers=1)).fit()
    assert result.error is None and not Path(str(result.metrics["folder"])).exists()
    assert isinstance(TorchCheckpoint.of(result.checkpoint).get_model(), torch.nn.Sequential)
