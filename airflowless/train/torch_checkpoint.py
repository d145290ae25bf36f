"""TorchCheckpoint: a Torch model in a checkpoint, and TorchPredictor, which scores with it (Ray's names).

>>> from airflowless.train.torch import TorchCheckpoint, TorchPredictor
>>> train.report({"loss": loss}, checkpoint=TorchCheckpoint.from_model(model))            # doctest: +SKIP
>>> TorchCheckpoint.of(result.checkpoint).get_model()                                   # doctest: +SKIP
>>> BatchPredictor.from_checkpoint(result.checkpoint, TorchPredictor).predict(valid_ds)  # doctest: +SKIP
>>> serve.run(PredictorDeployment.bind(TorchPredictor, result.checkpoint))               # doctest: +SKIP

``from_model`` saves the whole module (unwrapped from ``DistributedDataParallel``;
pickled with cloudpickle, so a class defined in your script or notebook goes
with it by value, and one from a module must be importable where it loads),
``from_state_dict`` only its weights (DDP's ``module.`` prefix taken off;
``get_model(model)`` loads them into a module you build). Either goes in
``model.pt``, and a preprocessor in ``preprocessor.pkl``, as Ray's did, in a
temporary folder that ``train.report`` copies to the run's storage and then
removes. ``model.pt`` is unpickled when it loads: load only checkpoints you
trust (your runs' own), as with any pickle.

:class:`TorchPredictor` applies the checkpoint's preprocessor to a pandas
frame, then, as Ray's: one column goes to the model as one tensor (a tensor
column as one ``(rows, *shape)`` tensor), several as a dict of tensors by
column name (``feature_columns`` picks them); a numpy array (no preprocessor)
goes as one tensor. Floating-point columns take the model's own floating dtype
unless ``dtype`` says otherwise (integer columns stay integers: give a
``Concatenator`` ``dtype="float32"``, or ``dtype=torch.float32``, when JSON
numbers such as ``3`` feed a float model). The model runs in eval mode without
gradients, through :meth:`TorchPredictor.call_model` (override it for another
calling convention); its output is the ``predictions`` column (a value per
row, or an array per row for a 2-D output), and a dict output gives a column
per key. Like Ray's, the predictor moves the module it is given to its device
and into eval mode, in place.
"""

from __future__ import annotations

import os
import pickle
import shutil
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
        """``checkpoint`` (any :class:`Checkpoint`, a path, a URL or ``models:/NAME@ALIAS``) as a Torch one."""
        if isinstance(checkpoint, str):
            checkpoint = Checkpoint.from_uri(checkpoint)
        return cls(checkpoint.path, storage_options=checkpoint.storage_options, model_uri=checkpoint.model_uri,
                   model_version=checkpoint.model_version)

    @classmethod
    def _written(cls, saved: Any, preprocessor: Any) -> TorchCheckpoint:
        import cloudpickle
        import torch

        if isinstance(saved, torch.nn.parallel.DistributedDataParallel | torch.nn.DataParallel):
            saved = saved.module  # a wrapper loads only where its process group exists
        elif isinstance(saved, dict):
            saved = type(saved)(saved)  # the caller's dict stays as it is
            torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(saved, "module.")
        folder = tempfile.mkdtemp(prefix="airflowless-torch-ckpt-")
        try:
            torch.save(saved, os.path.join(folder, MODEL_FILE), pickle_module=cloudpickle)
            save_preprocessor(folder, preprocessor)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        written = cls(folder)
        written.remove_after_report = True
        return written

    def get_model(self, model: torch.nn.Module | None = None) -> torch.nn.Module:
        """The saved module; for a state dict, ``model`` with the saved weights loaded into it."""
        import torch

        shown = self.model_uri or self.path
        with self.as_directory() as folder:
            path = os.path.join(folder, MODEL_FILE)
            if not os.path.exists(path):
                raise ConfigError(f"{shown} has no {MODEL_FILE}: write the checkpoint with "
                                  "TorchCheckpoint.from_model(model) or TorchCheckpoint.from_state_dict(...)")
            try:
                saved = torch.load(path, map_location="cpu", weights_only=False)  # your run's file (see the module)
            except (AttributeError, ImportError, pickle.UnpicklingError) as exc:
                raise ConfigError(f"{shown}: {MODEL_FILE} cannot be loaded here ({type(exc).__name__}: {exc}); a "
                                  "module's class saved from an importable module must be importable here") from exc
        if isinstance(saved, torch.nn.Module):
            if model is not None:
                warnings.warn("the checkpoint holds a whole module (TorchCheckpoint.from_model): the model "
                              "passed to get_model is not used", stacklevel=2)
            return saved
        if not isinstance(saved, dict):
            raise ConfigError(f"{shown}: {MODEL_FILE} holds a {type(saved).__name__}, neither a module nor a state "
                              "dict; write it with TorchCheckpoint.from_model or from_state_dict")
        if model is None:
            raise ConfigError(f"{shown} holds a state dict (TorchCheckpoint.from_state_dict): "
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

    def __init__(self, model: torch.nn.Module, preprocessor: Any = None, use_gpu: bool = False, *,
                 feature_columns: Sequence[str] | None = None, dtype: Any = None) -> None:
        import torch

        if use_gpu and not torch.cuda.is_available():
            raise ConfigError("TorchPredictor(use_gpu=True) where torch sees no CUDA device: run it on a GPU "
                              "worker (BatchPredictor.predict(num_gpus_per_worker=1), a deployment's num_gpus)")
        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.model = model.to(self.device).eval()
        self.preprocessor = preprocessor
        self.feature_columns = list(feature_columns) if feature_columns is not None else None
        self.dtype = dtype
        tensors = [*model.parameters(), *model.buffers()]
        self._float = next((t.dtype for t in tensors if t.is_floating_point()), None)  # None: leave inputs be
        self._columns = ["predictions"]  # what the last output gave (an empty frame answers with them)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint | str, model: torch.nn.Module | None = None,
                        use_gpu: bool = False, *, feature_columns: Sequence[str] | None = None,
                        dtype: Any = None) -> TorchPredictor:
        """A predictor of the checkpoint's module (``model``: the module to load a state dict into)."""
        found = TorchCheckpoint.of(checkpoint)
        with found.as_directory() as folder:  # one copy of a remote checkpoint for the model and the preprocessor
            local = TorchCheckpoint(folder, model_uri=found.model_uri or found.path)  # named as given in errors
            module, preprocessor = local.get_model(model), local.get_preprocessor()
        return cls(module, preprocessor, use_gpu, feature_columns=feature_columns, dtype=dtype)

    def call_model(self, inputs: Any) -> Any:
        """The model's output for ``inputs`` (a tensor, or a dict of them by column): override to call it
        another way (several positional tensors, a tuple output)."""
        return self.model(inputs)

    def predict(self, data: Any, dtype: Any = None) -> pd.DataFrame:
        """``predictions`` (or the keys of a dict output) for the rows of ``data`` (a frame, a dict of columns,
        or a numpy array); ``dtype``: a torch dtype for every column, or a dict of them by column (default: the
        predictor's ``dtype``)."""
        import numpy as np
        import pandas as pd
        import torch

        dtype = self.dtype if dtype is None else dtype
        if isinstance(data, np.ndarray):
            if self.preprocessor is not None:
                raise ConfigError("TorchPredictor.predict: pass a DataFrame when the checkpoint has a preprocessor "
                                  "(it transforms frames), not a numpy array")
            inputs: Any = self._tensor("the array", data, dtype if not isinstance(dtype, dict) else None)
            rows = len(data)
        else:
            frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
            if self.preprocessor is not None:
                frame = self.preprocessor.transform_batch(frame)
            columns = self.feature_columns if self.feature_columns is not None else list(frame.columns)
            missing = [c for c in columns if c not in frame.columns]
            if missing or not columns:
                raise ConfigError(f"TorchPredictor: the frame has no column(s) {missing or columns}; its columns "
                                  f"are {list(frame.columns)} (after the checkpoint's preprocessor)")
            rows = len(frame)
            if rows == 0:  # an empty block: no batch for the model
                return pd.DataFrame({name: [] for name in self._columns})
            tensors = {c: self._tensor(f"column {c!r}", frame[c].to_numpy(),
                                       dtype.get(c) if isinstance(dtype, dict) else dtype) for c in columns}
            inputs = tensors[columns[0]] if len(columns) == 1 else tensors
        with torch.no_grad():
            out = self.call_model(inputs)
        if isinstance(out, torch.Tensor):
            found = pd.DataFrame({"predictions": _column(out)})
        elif isinstance(out, dict) and all(isinstance(v, torch.Tensor) for v in out.values()):
            found = pd.DataFrame({name: _column(value) for name, value in out.items()})
        else:
            raise ConfigError(f"TorchPredictor: the model returned a {type(out).__name__}; it takes a tensor or a "
                              "dict of tensors (subclass TorchPredictor and override call_model to pick one)")
        if len(found) != rows:
            raise ConfigError(f"TorchPredictor: the model answered {len(found)} rows for {rows}")
        self._columns = list(found.columns)
        return found

    def _tensor(self, what: str, values: Any, dtype: Any) -> torch.Tensor:
        import numpy as np
        import torch

        try:
            if values.dtype == object:  # a tensor column: an array per row
                values = np.stack(values)
            if not values.flags.writeable:  # Arrow's memory, seen read-only: torch takes only writable arrays
                values = values.copy()
            tensor = torch.as_tensor(values)
        except (ValueError, TypeError) as exc:
            shapes = sorted({np.shape(v) for v in values[:1000]}, key=str) if values.dtype == object else None
            raise ConfigError(f"TorchPredictor: {what} does not make a tensor ({exc})"
                              + (f"; its rows have shapes {shapes[:5]}" if shapes else "")) from None
        if dtype is not None:
            tensor = tensor.to(dtype)
        elif tensor.is_floating_point() and self._float is not None:
            tensor = tensor.to(self._float)
        return tensor.to(self.device)


def _column(tensor: torch.Tensor) -> Any:
    """A model's output as a frame's column: a value per row, or an array per row."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16
        tensor = tensor.float()
    array = tensor.numpy()
    if array.ndim == 0:
        raise ConfigError("TorchPredictor: the model returned one value (a 0-d tensor), not one per row")
    return array if array.ndim == 1 else list(array)
