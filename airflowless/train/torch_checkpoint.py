"""TorchCheckpoint: a Torch model in a checkpoint, and TorchPredictor, which scores with it (Ray's names).

>>> from airflowless.train.torch import TorchCheckpoint, TorchPredictor
>>> train.report({"loss": loss}, checkpoint=TorchCheckpoint.from_model(model))            # doctest: +SKIP
>>> TorchCheckpoint.of(result.checkpoint).get_model()                                   # doctest: +SKIP
>>> BatchPredictor.from_checkpoint(result.checkpoint, TorchPredictor).predict(valid_ds)  # doctest: +SKIP
>>> serve.run(PredictorDeployment.bind(TorchPredictor, result.checkpoint))               # doctest: +SKIP

``from_model`` saves the whole module (``torch.save(model)``; loading it needs
its class importable where it loads, as in Ray), ``from_state_dict`` only its
weights (``get_model(model)`` loads them into a module you build). Either goes
in ``model.pt``, and a preprocessor in ``preprocessor.pkl``, as Ray's did, in
a new temporary folder that ``train.report`` copies to the run's storage.
``model.pt`` is unpickled when it loads: load only checkpoints you trust (your
runs' own), as with any pickle.

:class:`TorchPredictor` applies the checkpoint's preprocessor to a pandas
frame, then, as Ray's: one column goes to the model as one tensor (a tensor
column as one ``(rows, *shape)`` tensor), several as a dict of tensors by
column name (``feature_columns`` picks them). Floating-point columns take the
model's own floating dtype unless ``dtype`` says otherwise. The model runs in
eval mode without gradients; its output is the ``predictions`` column (a value
per row, or an array per row for a 2-D output), and a dict output gives a
column per key.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .checkpoint import Checkpoint
from .gbdt import load_preprocessor, save_preprocessor

if TYPE_CHECKING:
    import pandas as pd
    import torch

__all__ = ["TorchCheckpoint", "TorchPredictor", "MODEL_FILE"]

MODEL_FILE = "model.pt"


class TorchCheckpoint(Checkpoint):
    """A checkpoint holding a Torch module or its state dict in ``model.pt``."""

    @classmethod
    def from_model(cls, model: torch.nn.Module, *, preprocessor: Any = None) -> TorchCheckpoint:
        """The whole module (its class must be importable where it is loaded)."""
        return cls._written(model, preprocessor)

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, Any], *, preprocessor: Any = None) -> TorchCheckpoint:
        """Only the weights: ``get_model(model)`` loads them into a module built the same way."""
        return cls._written(state_dict, preprocessor)

    @classmethod
    def of(cls, checkpoint: Checkpoint | str) -> TorchCheckpoint:
        """``checkpoint`` (any :class:`Checkpoint`, or a path) read as a Torch checkpoint."""
        if isinstance(checkpoint, str):
            return cls(checkpoint)
        return cls(checkpoint.path, storage_options=checkpoint.storage_options, model_uri=checkpoint.model_uri,
                   model_version=checkpoint.model_version)

    @classmethod
    def _written(cls, saved: Any, preprocessor: Any) -> TorchCheckpoint:
        import torch

        folder = tempfile.mkdtemp(prefix="airflowless-torch-ckpt-")
        torch.save(saved, os.path.join(folder, MODEL_FILE))
        save_preprocessor(folder, preprocessor)
        return cls(folder)

    def get_model(self, model: torch.nn.Module | None = None) -> torch.nn.Module:
        """The saved module; for a state dict, ``model`` with the saved weights loaded into it."""
        import torch

        with self.as_directory() as folder:
            path = os.path.join(folder, MODEL_FILE)
            if not os.path.exists(path):
                raise ConfigError(f"{self.model_uri or self.path} has no {MODEL_FILE}: write the checkpoint with "
                                  "TorchCheckpoint.from_model(model) or TorchCheckpoint.from_state_dict(...)")
            saved = torch.load(path, map_location="cpu", weights_only=False)  # your run's file (see the module)
        if isinstance(saved, torch.nn.Module):
            if model is not None:
                warnings.warn("the checkpoint holds a whole module (TorchCheckpoint.from_model): the model "
                              "passed to get_model is not used", stacklevel=2)
            return saved
        if model is None:
            raise ConfigError(f"{self.model_uri or self.path} holds a state dict (TorchCheckpoint.from_state_dict): "
                              "pass get_model(model=YourModule(...)), built as when it was saved, to load it into")
        model.load_state_dict(saved)
        return model

    def get_preprocessor(self) -> Any:
        """The preprocessor saved with the model, or None."""
        return load_preprocessor(self)

    def __repr__(self) -> str:
        return f"TorchCheckpoint(path={self.path!r})"


class TorchPredictor:
    """Scores pandas frames with a Torch module (for ``BatchPredictor`` and ``PredictorDeployment``)."""

    def __init__(self, model: torch.nn.Module, preprocessor: Any = None, *, use_gpu: bool = False,
                 feature_columns: Sequence[str] | None = None) -> None:
        import torch

        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.model = model.to(self.device).eval()
        self.preprocessor = preprocessor
        self.feature_columns = list(feature_columns) if feature_columns is not None else None
        self._float = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint | str, model: torch.nn.Module | None = None, *,
                        use_gpu: bool = False, feature_columns: Sequence[str] | None = None) -> TorchPredictor:
        """A predictor of the checkpoint's module (``model``: the module to load a state dict into)."""
        found = TorchCheckpoint.of(checkpoint)
        return cls(found.get_model(model), found.get_preprocessor(), use_gpu=use_gpu,
                   feature_columns=feature_columns)

    def predict(self, data: Any, dtype: Any = None) -> pd.DataFrame:
        """``predictions`` (or the keys of a dict output) for the rows of ``data`` (a frame or dict of columns);
        ``dtype``: a torch dtype for every column, or a dict of them by column."""
        import pandas as pd
        import torch

        frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
        if self.preprocessor is not None:
            frame = self.preprocessor.transform_batch(frame)
        columns = self.feature_columns if self.feature_columns is not None else list(frame.columns)
        missing = [c for c in columns if c not in frame.columns]
        if missing or not columns:
            raise ConfigError(f"TorchPredictor: the frame has no column(s) {missing or columns}; its columns are "
                              f"{list(frame.columns)} (after the checkpoint's preprocessor)")
        tensors = {c: self._tensor(frame[c], dtype.get(c) if isinstance(dtype, dict) else dtype) for c in columns}
        with torch.no_grad():
            out = self.model(tensors[columns[0]] if len(columns) == 1 else tensors)
        if isinstance(out, dict):
            return pd.DataFrame({name: _column(value) for name, value in out.items()})
        return pd.DataFrame({"predictions": _column(out)})

    def _tensor(self, column: pd.Series, dtype: Any) -> torch.Tensor:
        import numpy as np
        import torch

        values: Any = column.to_numpy()
        if values.dtype == object:  # a tensor column: an array per row
            values = np.stack(values)
        if not values.flags.writeable:  # Arrow's memory, seen read-only: torch takes only writable arrays
            values = values.copy()
        tensor = torch.as_tensor(values)
        if dtype is not None:
            tensor = tensor.to(dtype)
        elif tensor.is_floating_point():
            tensor = tensor.to(self._float)
        return tensor.to(self.device)


def _column(tensor: torch.Tensor) -> Any:
    """A model's output as a frame's column: a value per row, or an array per row."""
    array = tensor.detach().cpu().numpy()
    return array if array.ndim == 1 else list(array)
