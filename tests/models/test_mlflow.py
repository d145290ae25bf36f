"""MLflow interop against a real ``mlflow server``: a registered XGBoost version exported as an MLflow model,
pushed to MLflow's registry (its pyfunc predicts what the booster does), and brought back as a new version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from airflowless import models
from airflowless.errors import ConfigError
from airflowless.models.mlflow import export_mlflow, import_from_mlflow, push_to_mlflow
from airflowless.store import Store, open_store
from tests.conftest import require_module
from tests.serve.test_predictor import FEATURES, make_checkpoint
from tests.support import mlflow as mlflow_support

require_module("mlflow")

mlflow_server = mlflow_support.mlflow_server  # the fixture


@pytest.fixture
def db(home: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    url = f"sqlite:///{home / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", url)
    return open_store(url)


def test_a_version_goes_to_mlflow_and_comes_back(mlflow_server: str, db: Store, tmp_path: Path) -> None:
    import mlflow
    import xgboost as xgb
    from mlflow.tracking import MlflowClient

    checkpoint, booster = make_checkpoint(tmp_path / "ckpt")
    models.register("taxi", checkpoint, metrics={"auc": 0.87}, tags={"data": "2026-11"}, store=db)
    rows = pd.DataFrame(np.random.default_rng(5).normal(size=(20, 3)), columns=FEATURES)
    expected = booster.predict(xgb.DMatrix(rows))

    assert export_mlflow("taxi", 1, tmp_path / "exported", store=db) == "xgboost"
    local = mlflow.pyfunc.load_model(str(tmp_path / "exported"))
    assert np.allclose(np.asarray(local.predict(rows)), expected, atol=1e-6)

    number = push_to_mlflow("taxi", 1, tracking_uri=mlflow_server, registered_name="taxi-from-airflowless",
                            store=db)
    client = MlflowClient(tracking_uri=mlflow_server)
    registered = client.get_model_version("taxi-from-airflowless", str(number))
    run = client.get_run(registered.run_id)
    assert run.data.metrics["auc"] == 0.87 and run.data.tags["airflowless.model"] == "taxi"
    mlflow.set_tracking_uri(mlflow_server)
    served = mlflow.pyfunc.load_model(f"models:/taxi-from-airflowless/{number}")
    assert np.allclose(np.asarray(served.predict(rows)), expected, atol=1e-6)

    back = import_from_mlflow(f"models:/taxi-from-airflowless/{number}", "taxi-roundtrip",
                              tracking_uri=mlflow_server, store=db)
    assert back.version == 1 and back.tags == {"mlflow.source": f"models:/taxi-from-airflowless/{number}"}
    again = xgb.Booster()
    again.load_model(str(Path(back.uri, "model.ubj")))
    assert np.allclose(again.predict(xgb.DMatrix(rows)), expected, atol=1e-6)


def test_a_torch_module_goes_to_mlflow_and_comes_back(mlflow_server: str, db: Store, tmp_path: Path) -> None:
    import mlflow

    torch = require_module("torch")
    from airflowless.train.torch import TorchCheckpoint

    class Net(torch.nn.Module):  # a class of the training script: it travels by value both ways
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))

        def forward(self, x: Any) -> Any:
            return self.layers(x)

    torch.manual_seed(0)
    module = Net()
    models.register("mlp", TorchCheckpoint.from_model(module), store=db)
    rows = np.random.default_rng(5).normal(size=(20, 3)).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(rows)).numpy()

    assert export_mlflow("mlp", 1, tmp_path / "exported", store=db) == "pytorch"
    assert np.allclose(np.asarray(mlflow.pyfunc.load_model(str(tmp_path / "exported")).predict(rows)), expected)
    number = push_to_mlflow("mlp", 1, tracking_uri=mlflow_server, registered_name="mlp-from-airflowless", store=db)
    back = import_from_mlflow(f"models:/mlp-from-airflowless/{number}", "mlp-roundtrip", tracking_uri=mlflow_server,
                              store=db)
    with torch.no_grad():
        again = TorchCheckpoint.of(back.uri).get_model()(torch.from_numpy(rows)).numpy()
    assert np.allclose(again, expected)

    models.register("weights", TorchCheckpoint.from_state_dict(module.state_dict()), store=db)
    with pytest.raises(ConfigError, match=r"state dict.*MLflow export takes a whole module"):
        export_mlflow("weights", 1, tmp_path / "weights", store=db)


def test_a_checkpoint_mlflow_has_no_flavour_for_is_refused(db: Store, tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\0" * 16)
    models.register("custom", str(folder), store=db)
    with pytest.raises(ConfigError, match="MLflow export takes XGBoost, LightGBM, scikit-learn and PyTorch"):
        export_mlflow("custom", 1, tmp_path / "out", store=db)


def test_the_cli_exports_a_version_as_an_mlflow_model(db: Store, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from airflowless.cli.main import cli

    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    models.register("taxi", checkpoint, store=db)
    done = CliRunner().invoke(cli, ["models", "export", "taxi", "1", "--to", str(tmp_path / "out"),
                                    "--db", str(db.url)])
    assert done.exit_code == 0 and "an MLflow xgboost model in" in done.output
    assert (tmp_path / "out" / "MLmodel").is_file()
    both = CliRunner().invoke(cli, ["models", "export", "taxi", "1", "--db", str(db.url)])
    assert both.exit_code != 0 and "give one of --to DIR or --mlflow URI" in both.output
