"""BatchPredictor: score a Dataset offline with a Train checkpoint, one model per worker process.

>>> predictor = BatchPredictor(result.checkpoint)                    # doctest: +SKIP
>>> scored = predictor.predict(valid_ds, keep_columns=["is_big_tip"]) # doctest: +SKIP
>>> scored.to_pandas().head()                                         # doctest: +SKIP

``scored`` is a lazy Dataset of the kept columns and a ``predictions`` column.

The scoring is a class-based ``map_batches``: each worker process loads the
model and the checkpoint's preprocessor once and keeps them for every block
it scores; the transform fuses with the rest of the plan into one task per block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..train.checkpoint import Checkpoint

__all__ = ["BatchPredictor"]


class _Scorer:
    def __init__(self, path: str, keep_columns: Sequence[str]) -> None:
        from ..train.gbdt import load_preprocessor
        from .predictor import load_model

        checkpoint = Checkpoint(path)
        with checkpoint.as_directory() as folder:
            self.kind, self.model, self.features = load_model(folder)
        self.preprocessor = load_preprocessor(checkpoint)
        self.keep = list(keep_columns)

    def __call__(self, frame: Any) -> Any:
        import numpy as np
        import pandas as pd

        kept = frame[self.keep].reset_index(drop=True) if self.keep else pd.DataFrame(index=range(len(frame)))
        features = self.preprocessor.transform_batch(frame) if self.preprocessor is not None else frame
        columns = self.features or [c for c in features.columns if c not in self.keep]
        x = features[columns]
        if self.kind == "xgboost":
            import xgboost as xgb

            predictions = self.model.predict(xgb.DMatrix(x))
        elif self.kind == "lightgbm":
            predictions = self.model.predict(x)
        else:
            scorer = getattr(self.model, "predict_proba", None)
            predictions = scorer(x)[:, 1] if scorer is not None else self.model.predict(x)
        return kept.assign(predictions=np.asarray(predictions))


class _CustomScorer:
    """A user's predictor class, built once per worker process from the checkpoint."""

    def __init__(self, path: str, predictor_cls: Any, kwargs: dict[str, Any], keep_columns: Sequence[str]) -> None:
        from .predictor import build_predictor

        self.predictor = build_predictor(predictor_cls, Checkpoint(path), kwargs)
        self.keep = list(keep_columns)

    def __call__(self, frame: Any) -> Any:
        import numpy as np
        import pandas as pd

        out = self.predictor.predict(frame)
        if isinstance(out, dict):
            out = pd.DataFrame(out)
        elif not isinstance(out, pd.DataFrame):
            out = pd.DataFrame({"predictions": list(np.asarray(out))})
        kept = frame[self.keep].reset_index(drop=True) if self.keep else pd.DataFrame(index=range(len(out)))
        return pd.concat([kept, out.reset_index(drop=True)], axis=1)


class BatchPredictor:
    """Offline predictions for a Dataset from a checkpoint (XGBoost, LightGBM or scikit-learn), a path, or a
    registered version (``models:/NAME@ALIAS``)."""

    def __init__(self, checkpoint: Checkpoint | str, predictor_cls: Any = None, **predictor_kwargs: Any) -> None:
        from ..models import checkpoint_of
        from .predictor import Predictor

        self.checkpoint = checkpoint_of(checkpoint)  # a models:/ URI resolved here, in the caller's process
        self.predictor_cls = None if predictor_cls is Predictor else predictor_cls
        self.predictor_kwargs = predictor_kwargs
        if self.predictor_cls is None and predictor_kwargs:
            raise ConfigError(f"BatchPredictor got predictor arguments {sorted(predictor_kwargs)} but no "
                              "predictor class; the built-in predictor takes none (pass predictor_cls=YourClass)")

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint | str, predictor_cls: Any = None,
                        **predictor_kwargs: Any) -> BatchPredictor:
        """As Ray's: a BatchPredictor over ``checkpoint``.

        ``predictor_cls`` None (or ``serve.Predictor``) uses the built-in scorer,
        which reads the model kind (XGBoost, LightGBM, scikit-learn) and the
        preprocessor from the checkpoint. Any other
        class is built once per worker process with
        ``predictor_cls.from_checkpoint(checkpoint, **predictor_kwargs)`` (or its
        constructor) and called as ``predict(pandas_frame)``.

        >>> BatchPredictor.from_checkpoint(result.checkpoint).predict(ds)   # doctest: +SKIP
        """
        return cls(checkpoint, predictor_cls, **predictor_kwargs)

    def predict(self, dataset: Any, *, keep_columns: Sequence[str] = (), concurrency: int | None = None,
                num_gpus_per_worker: float = 0) -> Any:
        """A lazy Dataset of ``keep_columns`` plus a ``predictions`` column.

        ``num_gpus_per_worker`` (Ray's): each scoring task asks for that many
        GPUs, so the model is loaded and run on GPU workers only (where the
        GPU is ``cuda:0``; a custom predictor class puts its model there).
        """
        if self.predictor_cls is not None:
            return dataset.map_batches(_CustomScorer, batch_format="pandas", concurrency=concurrency,
                                       fn_constructor_args=(self.checkpoint.path, self.predictor_cls,
                                                            self.predictor_kwargs, tuple(keep_columns)),
                                       num_gpus=num_gpus_per_worker)
        return dataset.map_batches(_Scorer, batch_format="pandas",
                                   fn_constructor_args=(self.checkpoint.path, tuple(keep_columns)),
                                   concurrency=concurrency, num_gpus=num_gpus_per_worker)
