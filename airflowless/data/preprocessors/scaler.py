"""Column scalers: each learns per-column statistics with one distributed pass.

>>> from airflowless.data.preprocessors import StandardScaler
>>> scaler = StandardScaler(columns=["trip_distance"]).fit(ds)   # doctest: +SKIP
>>> scaler.transform(ds).take(1)                                 # doctest: +SKIP
[{'trip_distance': -0.53...}]

Statistics ignore nulls/NaN and missing values stay missing, as in
scikit-learn. Outputs are float64. A constant column keeps finite values:
its scale is replaced by 1, with scikit-learn's rules for "constant".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from ..aggregate import Count, Max, Mean, Min, Std
from ._validation import COLUMNS, PERCENTILE_RANGE, Constraint
from .base import Preprocessor
from .quantiles import percentiles

if TYPE_CHECKING:
    from ..dataset import Dataset

__all__ = ["MinMaxScaler", "StandardScaler", "MaxAbsScaler", "RobustScaler", "handle_zeros_in_scale"]

_EPS = float(np.finfo(np.float64).eps)


def handle_zeros_in_scale(scale: Any, constant: Any = None) -> Any:
    """``scale`` with (near-)zero entries, or those flagged ``constant``, replaced by 1 (scikit-learn's rule).

    >>> handle_zeros_in_scale(np.array([2.0, 0.0, 1e-17])).tolist()
    [2.0, 1.0, 1.0]
    """
    scale = np.asarray(scale, dtype=np.float64)
    mask = scale < 10 * _EPS if constant is None else np.asarray(constant, dtype=bool)
    return np.where(mask, 1.0, scale)


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


class _ColumnScaler(Preprocessor):
    """Shared shape: ``columns``; ``_fit`` learns ``(offset, scale)`` per column; ``x -> (x - offset) / scale``."""

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"columns": COLUMNS}

    def __init__(self, columns: list[str]) -> None:
        self.columns = columns

    def _offset_scale(self) -> dict[str, tuple[float, float]]:
        raise NotImplementedError

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        self._require_columns(df, self.columns)
        return df.assign(**{c: (df[c].astype("float64") - offset) / scale
                            for c, (offset, scale) in self._offset_scale().items()})


class MinMaxScaler(_ColumnScaler):
    """Scale each column to [0, 1]: ``(x - min) / (max - min)``; learns ``data_min_``, ``data_max_``.

    Fit: one ``ds.aggregate(Min, Max)`` over all columns.

    >>> from airflowless import data
    >>> ds = data.from_items([{"x": 1.0, "y": 0.5}, {"x": 9.0, "y": 3.5}])
    >>> MinMaxScaler(columns=["x", "y"]).fit(ds).data_max_
    {'x': 9.0, 'y': 3.5}
    """

    _stat_names: ClassVar[dict[str, str]] = {"data_min_": "min", "data_max_": "max"}

    data_min_: dict[str, float]
    data_max_: dict[str, float]

    def _fit(self, ds: Dataset) -> None:
        stats = ds.aggregate(*[Min(c) for c in self.columns], *[Max(c) for c in self.columns])
        self.data_min_ = {c: _float(stats[Min(c).output_name]) for c in self.columns}
        self.data_max_ = {c: _float(stats[Max(c).output_name]) for c in self.columns}

    def _offset_scale(self) -> dict[str, tuple[float, float]]:
        return {c: (self.data_min_[c], float(handle_zeros_in_scale(self.data_max_[c] - self.data_min_[c])))
                for c in self.columns}


class StandardScaler(_ColumnScaler):
    """Zero mean, unit variance: ``(x - mean_) / scale_``, with the population std (ddof=0) like scikit-learn.

    Fit: one ``ds.aggregate(Mean, Std(ddof=0), Count)`` (block partials merged with
    Chan's formula). ``scale_`` is the std, or 1 for a constant column.

    >>> StandardScaler(columns=["x"]).fit(ds).mean_            # doctest: +SKIP
    {'x': 4.5}
    """

    _stat_names: ClassVar[dict[str, str]] = {"mean_": "mean", "scale_": "std"}

    mean_: dict[str, float]
    scale_: dict[str, float]

    def _fit(self, ds: Dataset) -> None:
        aggs = [(Mean(c), Std(c, ddof=0), Count(c)) for c in self.columns]
        stats = ds.aggregate(*[a for triple in aggs for a in triple])
        self.mean_, self.scale_ = {}, {}
        for c, triple in zip(self.columns, aggs, strict=True):
            mean, std, n = (np.float64(_float(stats[agg.output_name])) for agg in triple)
            with np.errstate(over="ignore", invalid="ignore"):  # huge values: inf, as in scikit-learn
                var = std * std
                # scikit-learn's _is_constant_feature: a variance within rounding error of 0
                constant = var <= n * _EPS * var + (n * mean * _EPS) ** 2
            self.mean_[c] = float(mean)
            self.scale_[c] = float(handle_zeros_in_scale(std, constant))

    def _offset_scale(self) -> dict[str, tuple[float, float]]:
        return {c: (self.mean_[c], self.scale_[c]) for c in self.columns}


class MaxAbsScaler(_ColumnScaler):
    """Scale each column by its largest absolute value, to [-1, 1]; learns ``max_abs_``.

    Fit: one ``ds.aggregate(Min, Max)``; ``max_abs = max(|min|, |max|)``.

    >>> MaxAbsScaler(columns=["x"]).fit(ds).max_abs_           # doctest: +SKIP
    {'x': 9.0}
    """

    _stat_names: ClassVar[dict[str, str]] = {"max_abs_": "abs_max"}

    max_abs_: dict[str, float]

    def _fit(self, ds: Dataset) -> None:
        stats = ds.aggregate(*[Min(c) for c in self.columns], *[Max(c) for c in self.columns])
        self.max_abs_ = {c: max(abs(_float(stats[Min(c).output_name])), abs(_float(stats[Max(c).output_name])))
                         for c in self.columns}

    def _offset_scale(self) -> dict[str, tuple[float, float]]:
        return {c: (0.0, float(handle_zeros_in_scale(self.max_abs_[c]))) for c in self.columns}


class RobustScaler(_ColumnScaler):
    """Center on the median and scale by the interquantile range: ``(x - center_) / scale_``.

    Learns ``center_`` and ``scale_`` (as scikit-learn) and the two quantiles,
    ``low_quantile_`` and ``high_quantile_`` (as Ray's ``stats_``).

    ``quantile_range=(q_min, q_max)`` in percent, (25, 75) by default. The
    quantiles are exact, equal to ``numpy.nanpercentile``: for each column one
    distributed sort, then only the needed rows are fetched (see
    :mod:`.quantiles` for why exact and what it costs).

    >>> RobustScaler(columns=["x"], quantile_range=(10, 90)).fit(ds).center_   # doctest: +SKIP
    {'x': 4.5}
    """

    _stat_names: ClassVar[dict[str, str]] = {
        "low_quantile_": "low_quantile", "center_": "median", "high_quantile_": "high_quantile"}

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "columns": COLUMNS, "quantile_range": PERCENTILE_RANGE}

    center_: dict[str, float]
    scale_: dict[str, float]
    low_quantile_: dict[str, float]
    high_quantile_: dict[str, float]

    def __init__(self, columns: list[str], quantile_range: tuple[float, float] = (25.0, 75.0)) -> None:
        self.columns = columns
        self.quantile_range = quantile_range

    def _fit(self, ds: Dataset) -> None:
        q_min, q_max = self.quantile_range
        self.center_, self.scale_, self.low_quantile_, self.high_quantile_ = {}, {}, {}, {}
        for c in self.columns:
            low, median, high = percentiles(ds, c, [q_min, 50.0, q_max])
            self.low_quantile_[c], self.center_[c], self.high_quantile_[c] = low, median, high
            self.scale_[c] = float(handle_zeros_in_scale(high - low))

    def _offset_scale(self) -> dict[str, tuple[float, float]]:
        return {c: (self.center_[c], self.scale_[c]) for c in self.columns}
