"""MLflow interop: a registered version as an MLflow model (XGBoost, LightGBM, scikit-learn, PyTorch flavours, each
with ``python_function``), pushed to an MLflow Model Registry, and an MLflow model version brought into this registry.

>>> export_mlflow("taxi-big-tip", 3, "/tmp/taxi-mlflow")                               # doctest: +SKIP
>>> push_to_mlflow("taxi-big-tip", 3, tracking_uri="http://127.0.0.1:5000")             # doctest: +SKIP
>>> import_from_mlflow("models:/taxi-big-tip/1", "taxi", tracking_uri="http://127.0.0.1:5000")  # doctest: +SKIP

What goes across is the model itself: a checkpoint's ``preprocessor.pkl`` (an
airflowless preprocessor) is not part of an MLflow flavour, and is left out
(the export says so). A Torch checkpoint goes across when its ``model.pt``
holds a whole module (``TorchCheckpoint.from_model``); weights alone have no
module to export. Needs the ``tracking`` extra (``mlflow``).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..store import Store
    from . import ModelVersion

__all__ = ["export_mlflow", "push_to_mlflow", "import_from_mlflow"]

_FLAVOURS = {"xgboost": "mlflow.xgboost", "lightgbm": "mlflow.lightgbm", "sklearn": "mlflow.sklearn",
             "pytorch": "mlflow.pytorch"}
# MLflow 3's default for PyTorch may trace the module, which needs an input example: the module is saved whole
# (MLflow before 3.x has no such option and always saves it whole)
_OPTIONS: dict[str, dict[str, Any]] = {"pytorch": {"serialization_format": "pickle"}}


def _options(kind: str, save: Any) -> dict[str, Any]:
    """The options of :data:`_OPTIONS` that this MLflow's ``save``/``log_model`` takes."""
    import inspect

    return {k: v for k, v in _OPTIONS.get(kind, {}).items() if k in inspect.signature(save).parameters}


def _flavour(kind: str) -> Any:
    import importlib

    try:
        return importlib.import_module(_FLAVOURS[kind])
    except ImportError as exc:
        raise ConfigError(f"MLflow interop needs mlflow: pip install 'airflowless[tracking]' ({exc})") from None


def _model_of(version: ModelVersion) -> tuple[str, Any]:
    from ..serve.predictor import load_model
    from ..train.torch_checkpoint import MODEL_FILE, TorchCheckpoint

    with version.checkpoint.as_directory() as folder:
        if os.path.exists(os.path.join(folder, MODEL_FILE)):
            try:
                return "pytorch", TorchCheckpoint.of(folder).get_model()
            except ConfigError as exc:  # a state dict: no module to export
                raise ConfigError(f"{version.model_uri}: {exc}; MLflow export takes a whole module "
                                  "(TorchCheckpoint.from_model)") from None
        try:
            kind, model, _ = load_model(folder)
        except FileNotFoundError as exc:
            raise ConfigError(f"{version.model_uri}: {exc}; MLflow export takes XGBoost, LightGBM, "
                              "scikit-learn and PyTorch checkpoints") from None
    return kind, model


def export_mlflow(name: str, version: int, path: str | os.PathLike[str], *, store: Store | None = None) -> str:
    """Write version ``version`` of model ``name`` as an MLflow model directory at ``path``; its flavour."""
    from . import get

    found = get(name, version, store=store)
    kind, model = _model_of(found)
    flavour = _flavour(kind)
    flavour.save_model(model, os.fspath(path), metadata=_metadata(found), **_options(kind, flavour.save_model))
    return kind


def push_to_mlflow(name: str, version: int, *, tracking_uri: str, registered_name: str | None = None,
                   store: Store | None = None) -> int:
    """Log version ``version`` of model ``name`` to the MLflow server at ``tracking_uri`` (a run with its metrics
    and tags) and register it there as ``registered_name`` (default ``name``); the MLflow version number."""
    import mlflow

    from . import get

    found = get(name, version, store=store)
    kind, model = _model_of(found)
    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(run_name=f"airflowless {name} v{version}"):
        numeric = {k: float(v) for k, v in (found.metrics or {}).items() if isinstance(v, int | float)}
        if numeric:
            mlflow.log_metrics(numeric)
        mlflow.set_tags({**(found.tags or {}), "airflowless.model": name, "airflowless.version": str(version),
                         "airflowless.digest": found.digest})
        flavour = _flavour(kind)
        info = flavour.log_model(model, name="model", registered_model_name=registered_name or name,
                                 metadata=_metadata(found), **_options(kind, flavour.log_model))
    registered = getattr(info, "registered_model_version", None)
    if registered is None:
        raise ConfigError(f"the MLflow server at {tracking_uri} did not register the model (has it a model "
                          "registry? a file store has none)")
    return int(registered)


def import_from_mlflow(model_uri: str, name: str, *, tracking_uri: str | None = None,
                       store: Store | None = None) -> ModelVersion:
    """A new version of model ``name`` from the MLflow model at ``model_uri`` (``models:/NAME/VERSION``,
    ``runs:/ID/model``... as MLflow reads them), written as an airflowless checkpoint."""
    import mlflow

    from . import register

    if tracking_uri is not None:
        mlflow.set_tracking_uri(tracking_uri)
    with tempfile.TemporaryDirectory(prefix="mlflow-import-") as work:
        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=work)
        flavours = mlflow.models.Model.load(local).flavors
        checkpoint = Path(work, "checkpoint")
        checkpoint.mkdir()
        if "xgboost" in flavours:
            _flavour("xgboost").load_model(local).save_model(str(checkpoint / "model.ubj"))
        elif "lightgbm" in flavours:
            _flavour("lightgbm").load_model(local).save_model(str(checkpoint / "model.txt"))
        elif "sklearn" in flavours:
            with open(checkpoint / "model.pkl", "wb") as f:
                pickle.dump(_flavour("sklearn").load_model(local), f)
        elif "pytorch" in flavours:
            import cloudpickle
            import torch

            from ..train.torch_checkpoint import MODEL_FILE

            module = _flavour("pytorch").load_model(local, map_location="cpu")
            if isinstance(module, torch.jit.ScriptModule):
                raise ConfigError(f"{model_uri} is a TorchScript module; the registry imports PyTorch modules "
                                  "saved whole (TorchCheckpoint.from_model's form), not TorchScript")
            torch.save(module, checkpoint / MODEL_FILE, pickle_module=cloudpickle)  # a class MLflow kept by value
        else:
            raise ConfigError(f"{model_uri} is an MLflow model of flavour(s) {sorted(flavours)}; the registry "
                              "imports xgboost, lightgbm, sklearn and pytorch")
        return register(name, str(checkpoint), description=f"imported from MLflow {model_uri}",
                        tags={"mlflow.source": model_uri}, store=store)


def _metadata(version: ModelVersion) -> dict[str, Any]:
    return {"airflowless_model": version.name, "airflowless_version": version.version,
            "airflowless_digest": version.digest}
