"""BatchPredictor: score a Dataset offline with a Train checkpoint, one model per worker process.

>>> predictor = BatchPredictor(result.checkpoint)                    # doctest: +SKIP
>>> scored = predictor.predict(valid_ds, keep_columns=["is_big_tip"]) # lazy Dataset with "predictions"
>>> scored.to_pandas().head()                                         # doctest: +SKIP

The scoring is a class-based ``map_batches``: each worker process loads the
model and the checkpoint's preprocessor once and keeps them for every block
it scores; the transform fuses with the rest of the plan into one task per block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


class BatchPredictor:
    """Offline predictions for a Dataset from a checkpoint (XGBoost, LightGBM or scikit-learn)."""

    def __init__(self, checkpoint: Checkpoint | str) -> None:
        self.checkpoint = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint)

    def predict(self, dataset: Any, *, keep_columns: Sequence[str] = (), concurrency: int | None = None) -> Any:
        """A lazy Dataset of ``keep_columns`` plus a ``predictions`` column."""
        return dataset.map_batches(_Scorer, batch_format="pandas",
                                   fn_constructor_args=(self.checkpoint.path, tuple(keep_columns)),
                                   concurrency=concurrency)
