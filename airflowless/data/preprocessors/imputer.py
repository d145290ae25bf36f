"""SimpleImputer: fill missing values with a per-column statistic or a constant.

>>> from airflowless.data.preprocessors import SimpleImputer
>>> imputer = SimpleImputer(columns=["tip"], strategy="mean").fit(ds)   # doctest: +SKIP
>>> imputer.statistics_                                                 # doctest: +SKIP
{'tip': 1.93}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from ..aggregate import Mean
from ._validation import ANY, COLUMNS, Constraint, InvalidParameterError, one_of
from .base import Preprocessor

if TYPE_CHECKING:
    from ..dataset import Dataset

__all__ = ["SimpleImputer"]


class SimpleImputer(Preprocessor):
    """Fill nulls/NaN in ``columns`` with ``statistics_[column]``.

    ``strategy``: "mean" (one ``ds.aggregate(Mean)`` pass), "most_frequent"
    (``ds.groupby(column).count()`` per column: one row per distinct value
    reaches the driver; ties go to the smallest value, as in scikit-learn), or
    "constant" (``fill_value``, which must then be given). Numeric columns come
    out as float64 (as in scikit-learn), so every block has the same schema;
    other columns keep their type.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "columns": COLUMNS, "strategy": one_of("mean", "most_frequent", "constant"), "fill_value": ANY}

    statistics_: dict[str, Any]

    def __init__(self, columns: list[str], strategy: str = "mean", fill_value: Any = None) -> None:
        self.columns = columns
        self.strategy = strategy
        self.fill_value = fill_value

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.strategy == "constant" and self.fill_value is None:
            raise InvalidParameterError(type(self).__name__, "fill_value",
                                        "a value to fill with when strategy='constant'", None)

    def _fit(self, ds: Dataset) -> None:
        if self.strategy == "mean":
            stats = ds.aggregate(*[Mean(c) for c in self.columns])
            self.statistics_ = {c: stats[Mean(c).output_name] for c in self.columns}
        elif self.strategy == "most_frequent":
            self.statistics_ = {c: _most_frequent(ds, c) for c in self.columns}
        else:
            self.statistics_ = {c: self.fill_value for c in self.columns}

    def _stats_sources(self) -> dict[str, str]:
        # Ray names the statistic after the strategy; a constant is a parameter, not a statistic
        return {} if self.strategy == "constant" else {"statistics_": self.strategy}

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        self._require_columns(df, self.columns)
        filled = {}
        for c in self.columns:
            column = df[c]
            if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
                column = column.astype("float64")
            value = self.statistics_[c]
            filled[c] = column if value is None else column.fillna(value)
        return df.assign(**filled)


def _most_frequent(ds: Dataset, column: str) -> Any:
    counts = [row for row in ds.groupby(column).count().take_all() if not pd.isna(row[column])]
    if not counts:
        return None
    top = max(row["count()"] for row in counts)
    return min(row[column] for row in counts if row["count()"] == top)
