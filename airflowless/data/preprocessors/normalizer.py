"""Normalizer: each row (over some columns) scaled to unit norm; stateless.

>>> import pandas as pd
>>> from airflowless.data.preprocessors import Normalizer
>>> Normalizer(columns=["x", "y"]).transform_batch(pd.DataFrame({"x": [3.0], "y": [4.0]}))
     x    y
0  0.6  0.8
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pandas as pd

from ._validation import COLUMNS, Constraint, one_of
from .base import Preprocessor
from .scaler import handle_zeros_in_scale

__all__ = ["Normalizer"]


class Normalizer(Preprocessor):
    """Divide each row's ``columns`` by the row's ``norm``: "l2" (default), "l1" or "max" (largest |x|).

    Rows whose norm is 0 are left unchanged, as in scikit-learn. Needs no fit.
    """

    _is_fittable: ClassVar[bool] = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "columns": COLUMNS, "norm": one_of("l2", "l1", "max")}

    def __init__(self, columns: list[str], norm: str = "l2") -> None:
        self.columns = columns
        self.norm = norm

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        self._require_columns(df, self.columns)
        values = df[list(self.columns)].to_numpy(dtype=np.float64)
        if self.norm == "l2":
            norms = np.sqrt(np.einsum("ij,ij->i", values, values))
        elif self.norm == "l1":
            norms = np.abs(values).sum(axis=1)
        else:
            norms = np.abs(values).max(axis=1, initial=0.0)
        scaled = values / handle_zeros_in_scale(norms)[:, None]
        return df.assign(**{c: scaled[:, i] for i, c in enumerate(self.columns)})
