"""Categorical encoders: categories learned with a distributed ``unique`` per column.

>>> from airflowless.data.preprocessors import OneHotEncoder
>>> enc = OneHotEncoder(columns=["payment_type"]).fit(ds)     # doctest: +SKIP
>>> enc.categories_                                          # doctest: +SKIP
{'payment_type': ['card', 'cash']}

Categories are the sorted distinct non-missing values (as scikit-learn's
``categories="auto"``). ``Dataset.unique`` groups by the column on the
workers; only the distinct values reach the driver.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from ._validation import COLUMN, COLUMNS, Constraint
from .base import Preprocessor

if TYPE_CHECKING:
    from ..dataset import Dataset

__all__ = ["OrdinalEncoder", "OneHotEncoder", "LabelEncoder"]


def _categories(ds: Dataset, column: str) -> list[Any]:
    values = ds.unique(column)
    return sorted(v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v)))


def _codes(series: pd.Series, categories: list[Any]) -> pd.Series:
    """Each value's index in ``categories``; missing or unknown values give <NA> (nullable Int64)."""
    return series.map({v: i for i, v in enumerate(categories)}).astype("Int64")


class _CategoricalEncoder(Preprocessor):
    """What the column encoders share: ``columns`` and the categories learned with a distributed unique."""

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"columns": COLUMNS}
    _stat_names: ClassVar[dict[str, str]] = {"categories_": "unique_values"}

    categories_: dict[str, list[Any]]

    def __init__(self, columns: list[str]) -> None:
        self.columns = columns

    def _fit(self, ds: Dataset) -> None:
        self.categories_ = {c: _categories(ds, c) for c in self.columns}



class OrdinalEncoder(_CategoricalEncoder):
    """Replace each category by its index in the sorted categories; learns ``categories_``.

    Unknown categories (not seen in fit) and missing values become <NA>
    (nullable ``Int64``; null in the dataset), where scikit-learn would raise.

    >>> OrdinalEncoder(columns=["color"]).fit(ds).categories_   # doctest: +SKIP
    {'color': ['blue', 'green', 'red']}
    """

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        self._require_columns(df, self.columns)
        return df.assign(**{c: _codes(df[c], self.categories_[c]) for c in self.columns})


class OneHotEncoder(_CategoricalEncoder):
    """Replace each column by one 0/1 (uint8) column per category, named ``<column>_<category>``.

    Learns ``categories_``. The encoded columns are dropped and the indicator
    columns appended. Unknown categories and missing values give all zeros,
    like scikit-learn's ``handle_unknown="ignore"``.

    >>> OneHotEncoder(columns=["color"]).fit(ds).transform(ds).columns()   # doctest: +SKIP
    ['x', 'color_blue', 'color_green', 'color_red']
    """

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        self._require_columns(df, self.columns)
        indicators: dict[str, Any] = {}
        for c in self.columns:
            codes = _codes(df[c], self.categories_[c]).to_numpy(dtype=np.int64, na_value=-1)
            for i, value in enumerate(self.categories_[c]):
                indicators[f"{c}_{value}"] = (codes == i).astype(np.uint8)
        return pd.concat([df.drop(columns=list(self.columns)), pd.DataFrame(indicators, index=df.index)], axis=1)


class LabelEncoder(Preprocessor):
    """Replace the label by its index in the sorted classes; learns ``classes_``.

    A batch without the label column (a serving request) passes through
    unchanged; unknown labels become <NA> (nullable ``Int64``).

    >>> LabelEncoder(label_column="is_big_tip").fit(ds).classes_   # doctest: +SKIP
    [False, True]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"label_column": COLUMN}
    _stat_names: ClassVar[dict[str, str]] = {"classes_": "unique_values"}

    classes_: list[Any]

    def __init__(self, label_column: str) -> None:
        self.label_column = label_column

    def _fit(self, ds: Dataset) -> None:
        self.classes_ = _categories(ds, self.label_column)

    def _per_column(self, attribute: str) -> dict[str, Any]:
        return {self.label_column: getattr(self, attribute)}

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        if self.label_column not in df.columns:
            return df
        return df.assign(**{self.label_column: _codes(df[self.label_column], self.classes_)})
