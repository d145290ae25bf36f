"""Concatenator: several columns into one column of vectors; stateless.

>>> import pandas as pd
>>> from airflowless.data.preprocessors import Concatenator
>>> out = Concatenator(columns=["x", "y"], dtype="float32").transform_batch(pd.DataFrame({"x": [1], "y": [2]}))
>>> out["concat_out"][0]
array([1., 2.], dtype=float32)
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ._validation import COLUMN, COLUMNS, DTYPE_OR_NONE, Constraint
from .base import Preprocessor

__all__ = ["Concatenator"]


class Concatenator(Preprocessor):
    """Replace ``columns`` by ``output_column_name``: per row a 1-D numpy array of their values, in order.

    In a Dataset the column becomes a tensor column (an Arrow fixed-size
    list): numpy batches see one ``(rows, len(columns))`` array and
    ``iter_torch_batches`` a 2-D tensor. ``dtype`` (e.g. "float32") sets the
    vectors' type; None gives numpy's common type of numeric columns (float64
    when a value is missing: missing values, also nullable ``Int64`` ones, become
    NaN) or object for other columns. Needs no fit.
    """

    _is_fittable: ClassVar[bool] = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "columns": COLUMNS, "output_column_name": COLUMN, "dtype": DTYPE_OR_NONE}

    def __init__(self, columns: list[str], output_column_name: str = "concat_out", dtype: Any = None) -> None:
        self.columns = columns
        self.output_column_name = output_column_name
        self.dtype = dtype

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        self._require_columns(df, self.columns)
        values = df[list(self.columns)]
        dtype = _common_numeric_dtype(values) if self.dtype is None else np.dtype(self.dtype)
        matrix = values.to_numpy(dtype=dtype, na_value=np.nan) if dtype is not None else values.to_numpy()
        vectors = pd.Series(list(matrix), index=df.index, dtype=object)
        return df.drop(columns=list(self.columns)).assign(**{self.output_column_name: vectors})


def _common_numeric_dtype(values: pd.DataFrame) -> np.dtype[Any] | None:
    """numpy's common type of numeric (also nullable) columns, float64 if a value is missing; else None."""
    if not all(pd.api.types.is_numeric_dtype(t) for t in values.dtypes):
        return None
    dtype = np.result_type(*[getattr(t, "numpy_dtype", t) for t in values.dtypes])
    if values.isna().to_numpy().any():
        dtype = np.result_type(dtype, np.float64)
    return dtype
