"""BatchMapper: a user function as a (stateless) preprocessor.

>>> import pandas as pd
>>> from airflowless.data.preprocessors import BatchMapper
>>> double = BatchMapper(lambda df: df.assign(x=df["x"] * 2))
>>> double.transform_batch(pd.DataFrame({"x": [1, 2]}))["x"].tolist()
[2, 4]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pandas as pd
import pyarrow as pa

from ..block import BATCH_FORMATS, from_batch, to_batch
from ._validation import CALLABLE, Constraint, one_of
from .base import Preprocessor

__all__ = ["BatchMapper"]


class BatchMapper(Preprocessor):
    """``fn(batch) -> batch`` with batches in ``batch_format`` ("pandas", "numpy" or "pyarrow").

    ``transform`` maps ``fn`` in its own format; ``transform_batch`` converts
    the pandas batch to that format and back. Needs no fit. Saved with
    cloudpickle, so lambdas and notebook functions survive a checkpoint.
    """

    _is_fittable: ClassVar[bool] = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "fn": CALLABLE, "batch_format": one_of(*BATCH_FORMATS)}

    def __init__(self, fn: Callable[[Any], Any], batch_format: str = "pandas") -> None:
        self.fn = fn
        self.batch_format = batch_format

    def _native_format(self) -> str:
        return self.batch_format

    def _transform_native(self, batch: Any) -> Any:
        return self.fn(batch)

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        if self.batch_format == "pandas":
            out = self.fn(df)
            if isinstance(out, pd.DataFrame):
                return out
        else:
            out = self.fn(to_batch(pa.Table.from_pandas(df, preserve_index=False), self.batch_format))
        return from_batch(out, where=f"BatchMapper({getattr(self.fn, '__name__', 'fn')})").to_pandas()
