"""Chain: preprocessors applied in sequence, each fitted on the output of the ones before.

>>> from airflowless.data.preprocessors import Chain, Concatenator, SimpleImputer, StandardScaler
>>> chain = Chain(SimpleImputer(columns=["x"]), StandardScaler(columns=["x", "y"]),
...               Concatenator(columns=["x", "y"], output_column_name="features"))
>>> chain.fit(ds).transform(ds)                             # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import pandas as pd

from ._validation import Constraint
from .base import Preprocessor

if TYPE_CHECKING:
    from ..dataset import Dataset

__all__ = ["Chain"]


def _are_preprocessors(value: object) -> bool:
    return isinstance(value, tuple) and len(value) > 0 and all(isinstance(p, Preprocessor) for p in value)


class Chain(Preprocessor):
    """``Chain(p1, p2, ...)``: ``fit`` fits ``p1`` on ``ds``, ``p2`` on ``p1.transform(ds)``, and so on.

    The steps hold the learned state (a Chain adds none). ``transform`` maps
    each step in turn; the maps fuse into one task per block. A Chain of
    stateless steps needs no fit.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "preprocessors": Constraint("one or more Preprocessor instances", _are_preprocessors)}

    def __init__(self, *preprocessors: Preprocessor) -> None:
        self.preprocessors = preprocessors

    def fit(self, ds: Dataset) -> Chain:
        """Fit every step on the (lazy) output of the steps before it; return ``self``."""
        self._validate_params()
        last = len(self.preprocessors) - 1
        for i, step in enumerate(self.preprocessors):
            if i < last:
                ds = step.fit_transform(ds)
            else:
                step.fit(ds)
        return self

    def transform(self, ds: Dataset) -> Dataset:
        """Each step's lazy map in turn (fused into one task per block by the optimizer)."""
        self._check_ready()
        for step in self.preprocessors:
            ds = step.transform(ds)
        return ds

    def _check_ready(self) -> None:
        self._validate_params()
        for step in self.preprocessors:
            step._check_ready()

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        for step in self.preprocessors:
            df = step._transform_pandas(df)
        return df
