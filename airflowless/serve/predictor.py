"""``PredictorDeployment``: serve a Train checkpoint's model behind ``POST /predict``.

The checkpoint holds an XGBoost (``model.ubj``), LightGBM (``model.txt``) or
scikit-learn (``model.pkl``) model, and the trainer's ``preprocessor.pkl``
(applied with ``transform_batch`` on a pandas DataFrame). The body is one row
(a JSON object) or a list of rows; the answer is ``{"predictions": [...]}``.
Concurrent requests are batched and scored in one call. Rows of numbers for a
model without a preprocessor go to the model as one float64 array in its
feature order (building a pandas DataFrame costs ~1 ms of CPU per batch, five
times scoring a LogisticRegression); anything else (strings, a preprocessor,
a custom predictor or http_adapter's frame) goes through a DataFrame.

>>> app = serve.PredictorDeployment.bind(result.checkpoint)      # doctest: +SKIP
>>> serve.run(app, name="taxi")                                   # doctest: +SKIP
>>> httpx.post("http://127.0.0.1:8000/predict", json={"trip_distance": 2.1, ...}).json()  # doctest: +SKIP
{'predictions': [0.73]}
"""

from __future__ import annotations

import asyncio
import math
import os
import pickle
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import ConfigError, UsageError
from ..train.checkpoint import Checkpoint
from .batching import batch
from .deployment import deployment
from .errors import BadRequestError
from .routing import route

__all__ = ["Predictor", "PredictorDeployment", "build_predictor", "load_model"]

_MAX_ROWS = 10_000
_MAX_STRING = 10_000
_NUMERIC = frozenset({int, float, bool, type(None)})


MODEL_FILES = {"model.ubj": "XGBoost", "model.txt": "LightGBM", "model.pkl": "scikit-learn"}


def load_model(folder: str) -> tuple[str, Any, list[str] | None]:
    """(kind, model, feature names) from a checkpoint folder."""
    if os.path.exists(os.path.join(folder, "model.ubj")):
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(os.path.join(folder, "model.ubj"))
        return "xgboost", booster, list(booster.feature_names or []) or None
    if os.path.exists(os.path.join(folder, "model.txt")):
        import lightgbm as lgb

        model = lgb.Booster(model_file=os.path.join(folder, "model.txt"))
        return "lightgbm", model, list(model.feature_name())
    if os.path.exists(os.path.join(folder, "model.pkl")):
        with open(os.path.join(folder, "model.pkl"), "rb") as f:
            model = pickle.load(f)  # noqa: S301 - a checkpoint written by our trainer, not a request
        names = getattr(model, "feature_names_in_", None)
        return "sklearn", model, [str(n) for n in names] if names is not None else None
    raise FileNotFoundError(f"the checkpoint at {folder} has no model.ubj (XGBoost), model.txt (LightGBM) or "
                            "model.pkl (scikit-learn); pass a checkpoint written by an airflowless trainer")


def _check_loadable(checkpoint: Checkpoint) -> None:
    """Refuse, in the caller's process, a checkpoint the built-in predictor cannot load (another framework's,
    e.g. a Torch state dict), instead of replicas that fail to start; a listing that fails is left to them."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(checkpoint.path, **checkpoint.storage_options)
        names = {str(p).rstrip("/").rpartition("/")[2] for p in fs.ls(root, detail=False)}
    except Exception:
        return
    if not names & set(MODEL_FILES):
        shown = checkpoint.model_version or checkpoint.path
        raise ConfigError(f"{shown} holds {sorted(names)[:10]}, no model the built-in predictor loads "
                          f"({', '.join(f'{f} ({k})' for f, k in MODEL_FILES.items())}); serve another framework's "
                          "model with PredictorDeployment.bind(YourPredictor, checkpoint), a class with "
                          "from_checkpoint(checkpoint) and predict(frame)")


def _value(column: str, value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > 2**53:
            raise BadRequestError(f"column {column!r}: {str(value)[:40]} is too large for a float64 feature")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadRequestError(f"column {column!r}: expected a finite number, got {value}")
        return value
    if isinstance(value, str) and len(value) <= _MAX_STRING:
        return value
    raise BadRequestError(f"column {column!r}: expected a number, string or null, got {type(value).__name__}")


def rows_of(body: Any, required: list[str] | None) -> list[dict[str, Any]]:
    """Validate a request body into a list of rows; :class:`BadRequestError` says what is wrong."""
    if isinstance(body, dict):
        rows = [body]
    elif isinstance(body, list) and body and all(isinstance(r, dict) for r in body):
        rows = body
    else:
        got = "an empty list" if body == [] else type(body).__name__
        raise BadRequestError(f"expected one row as a JSON object of column -> value, or a list of such "
                              f"objects, got {got}")
    if len(rows) > _MAX_ROWS:
        raise BadRequestError(f"at most {_MAX_ROWS} rows per request, got {len(rows)}")
    clean = []
    for row in rows:
        clean.append({str(k): _value(k, v) for k, v in row.items()})
        if required:
            missing = [c for c in required if c not in row]
            if missing:
                raise BadRequestError(f"missing feature column(s) {missing}; each row needs {required}")
    return clean


class Predictor:
    """Loads a checkpoint's model and preprocessor; ``predict(body)`` answers ``{"predictions": [...]}``.

    With ``predictor_cls`` (Ray's form, either argument order:
    ``PredictorDeployment.bind(MyPredictor, checkpoint, http_adapter=...)``) the
    model is ``predictor_cls.from_checkpoint(checkpoint, **predictor_kwargs)``
    (or ``predictor_cls(checkpoint, ...)``), scored with its ``predict(frame)``.
    ``http_adapter(body)`` turns the parsed JSON body into the pandas DataFrame
    to score (default: one row per JSON object); it sees JSON, never a pickle.
    """

    @staticmethod
    def __serve_bind__(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """At ``bind()``, in the caller's process: a ``models:/`` URI resolved through the record (and its files
        checked), so replicas get the version's files, wherever they run."""
        from ..models import checkpoint_of, is_model_uri

        args = tuple(checkpoint_of(a) if is_model_uri(a) else a for a in args)
        if is_model_uri(kwargs.get("checkpoint")):
            kwargs = {**kwargs, "checkpoint": checkpoint_of(kwargs["checkpoint"])}
        built_in = kwargs.get("predictor_cls") in (None, Predictor) and not any(
            isinstance(a, type) and a is not Predictor for a in args[:2])
        checkpoint = kwargs.get("checkpoint", args[0] if args else None)
        if built_in and isinstance(checkpoint, Checkpoint | str):
            _check_loadable(checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint))
        return args, kwargs

    def __init__(self, checkpoint: Checkpoint | str | type, predictor_cls: Any = None, *,
                 http_adapter: Callable[[Any], Any] | None = None, feature_columns: list[str] | None = None,
                 **predictor_kwargs: Any) -> None:
        from ..train.gbdt import load_preprocessor

        if isinstance(checkpoint, type):  # Ray's argument order: (predictor class, checkpoint)
            checkpoint, predictor_cls = predictor_cls, checkpoint
        if predictor_cls is Predictor:
            predictor_cls = None
        if predictor_cls is None and predictor_kwargs:
            raise UsageError(f"PredictorDeployment got {sorted(predictor_kwargs)} without a predictor class; the "
                            "built-in predictor takes none (pass predictor_cls=YourPredictor)")
        checkpoint = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(str(checkpoint))
        self.http_adapter = http_adapter
        self.custom: Any = None
        self.model: Any = None
        self._array_ok = False
        if predictor_cls is not None:
            if feature_columns is not None and _takes(predictor_cls, "feature_columns"):  # TorchPredictor's own
                predictor_kwargs, feature_columns = {**predictor_kwargs, "feature_columns": feature_columns}, None
            self.custom = build_predictor(predictor_cls, checkpoint, predictor_kwargs)
            self.kind, self.preprocessor = "custom", None
            self.features = list(feature_columns) if feature_columns is not None else None
        else:
            with checkpoint.as_directory() as folder:
                self.kind, self.model, names = load_model(folder)
            self.preprocessor = load_preprocessor(checkpoint)
            self.features = list(feature_columns) if feature_columns is not None else names
            # an array carries no names: for a scikit-learn model fitted with names, only when they match in order
            self._array_ok = self.preprocessor is None and bool(self.features) and (
                self.kind != "sklearn" or names is None or self.features == names)
            if self._array_ok and self.kind == "sklearn" and names is not None:
                _quiet_feature_names_warning()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="predictor")

    def _numeric_rows(self, rows: list[dict[str, Any]]) -> Any:
        """``rows`` as a float64 array in :attr:`features`' order, or None when the fast path does not apply.

        It applies to a built-in model without a preprocessor whose feature
        names are known (for scikit-learn, the ones it was fitted with, in
        order), when every feature of every row is a number, a bool or null
        (NaN, as in the DataFrame path). Anything else (a missing column, a
        string) takes the DataFrame path, which says what is wrong.
        """
        features = self.features
        if not self._array_ok or not features:
            return None
        import numpy as np

        try:
            table = [[row[name] for name in features] for row in rows]
        except KeyError:
            return None
        if not all(type(value) in _NUMERIC for line in table for value in line):
            return None
        return np.array(table, dtype=np.float64)

    def _score(self, rows: list[dict[str, Any]]) -> list[Any]:
        values = self._numeric_rows(rows)
        if values is not None:
            try:
                out = self.model.inplace_predict(values) if self.kind == "xgboost" else self.model.predict(values)
            except (ValueError, TypeError) as exc:
                raise BadRequestError(f"the model could not score these rows: {exc}") from exc
            return out.tolist()  # type: ignore[no-any-return]
        import pandas as pd

        frame = pd.DataFrame.from_records(rows)
        if self.custom is not None:
            return _as_list(self.custom.predict(frame))
        if self.preprocessor is not None:
            try:
                frame = self.preprocessor.transform_batch(frame)
            except (KeyError, ValueError, TypeError) as exc:  # a missing or malformed column of the request
                raise BadRequestError(f"the checkpoint's preprocessor cannot transform these rows: "
                                      f"{type(exc).__name__}: {exc}") from exc
        if self.features:
            missing = [c for c in self.features if c not in frame.columns]
            if missing:
                raise BadRequestError(f"missing feature column(s) {missing}; each row needs {self.features}")
            frame = frame[self.features]
        try:
            values = frame.to_numpy(dtype="float64", na_value=float("nan")) if self.kind != "sklearn" else frame
            if self.kind == "xgboost":
                out = self.model.inplace_predict(values)
            else:
                out = self.model.predict(values)
        except (ValueError, TypeError) as exc:
            raise BadRequestError(f"the model could not score these rows: {exc}") from exc
        return out.tolist()  # type: ignore[no-any-return]

    @batch(max_batch_size=64, batch_wait_timeout_s=0.0)
    async def _score_batch(self, requests: list[list[dict[str, Any]]]) -> list[Any]:
        loop = asyncio.get_running_loop()
        flat = [row for rows in requests for row in rows]
        try:
            scores = await loop.run_in_executor(self._executor, self._score, flat)
        except Exception:
            if len(requests) == 1:
                raise
            # one bad request must not fail the others of its batch: score each alone
            return list(await asyncio.gather(*(loop.run_in_executor(self._executor, self._one, rows)
                                               for rows in requests)))
        out, start = [], 0
        for rows in requests:
            out.append(scores[start:start + len(rows)])
            start += len(rows)
        return out

    def _one(self, rows: list[dict[str, Any]]) -> Any:
        try:
            return self._score(rows)
        except Exception as exc:
            return exc

    @route("/predict")
    async def predict(self, body: Any) -> dict[str, Any]:
        if self.http_adapter is not None:
            body = self._adapt(body)
        rows = rows_of(body, self.features if self.preprocessor is None else None)
        result = await self._score_batch(rows)
        if isinstance(result, Exception):
            raise result
        return {"predictions": result}

    def _adapt(self, body: Any) -> list[dict[str, Any]]:
        """The http_adapter's frame for ``body``, as rows; its errors are the request's fault (400)."""
        import pandas as pd

        assert self.http_adapter is not None
        try:
            frame = pd.DataFrame(self.http_adapter(body))
        except (KeyError, ValueError, TypeError) as exc:
            raise BadRequestError(f"the http_adapter could not read this body: {type(exc).__name__}: {exc}") from exc
        return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]

    async def __call__(self, body: Any) -> dict[str, Any]:
        return await self.predict(body)


def _quiet_feature_names_warning() -> None:
    """Silence, in this process, scikit-learn's warning that an array has no feature names.

    The fast path (:meth:`Predictor._numeric_rows`) scores an array whose
    columns are the model's ``feature_names_in_`` in order, which scikit-learn
    cannot see and warns about on every call. A filter of the ``warnings``
    module is process-wide (``catch_warnings`` around each call is not
    thread-safe); this one matches that message only.
    """
    import warnings

    warnings.filterwarnings("ignore", message="X does not have valid feature names, but", category=UserWarning)


def build_predictor(predictor_cls: Any, checkpoint: Checkpoint, kwargs: dict[str, Any]) -> Any:
    """A user's predictor: ``predictor_cls.from_checkpoint(checkpoint, **kwargs)``, else its constructor."""
    build = getattr(predictor_cls, "from_checkpoint", None)
    return build(checkpoint, **kwargs) if build is not None else predictor_cls(checkpoint, **kwargs)


def _takes(predictor_cls: Any, name: str) -> bool:
    """Whether the class's ``from_checkpoint`` (or constructor) has a parameter ``name``."""
    import inspect

    try:
        return name in inspect.signature(getattr(predictor_cls, "from_checkpoint", predictor_cls)).parameters
    except (TypeError, ValueError):
        return False


def _as_list(out: Any) -> list[Any]:
    """A predictor's output as JSON-ready predictions: one value per row, or one record per row."""
    import numpy as np
    import pandas as pd

    if isinstance(out, dict):
        out = pd.DataFrame(out)
    if isinstance(out, pd.DataFrame):
        rows = out.iloc[:, 0].tolist() if out.shape[1] == 1 else out.to_dict("records")
        return [_listed(row) for row in rows]  # a column may hold an array per row (a model's 2-D output)
    return np.asarray(out).tolist()  # type: ignore[no-any-return]


def _listed(value: Any) -> Any:
    """``value`` with numpy arrays and numbers (in a record too) as lists and Python numbers."""
    if isinstance(value, dict):
        return {key: _listed(item) for key, item in value.items()}
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


PredictorDeployment = deployment(Predictor, name="PredictorDeployment")
