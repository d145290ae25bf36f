"""Preprocessor: scikit-learn's estimator contract over distributed Datasets.

>>> from airflowless.data.preprocessors import MinMaxScaler
>>> scaler = MinMaxScaler(columns=["x"])      # stores the arguments, nothing else
>>> scaler
MinMaxScaler(columns=['x'])
>>> scaler.fit(ds)                            # doctest: +SKIP
MinMaxScaler(columns=['x'])
>>> scaler.data_min_, scaler.data_max_        # doctest: +SKIP
({'x': 0.0}, {'x': 9.0})

The lifecycle, in call order:

1. ``__init__(**params)`` stores its arguments as attributes of the same
   names; it validates and computes nothing.
2. ``fit(ds)`` validates every parameter against the class's
   ``_parameter_constraints`` (:class:`InvalidParameterError` otherwise), drops
   learned state from an earlier fit, and calls the ``_fit(ds)`` hook, which
   computes the learned attributes (names ending in ``_``) with distributed
   aggregations (``ds.aggregate``, ``ds.groupby``, ``ds.unique``): only small
   results reach the driver. It returns ``self``.
3. ``transform(ds)`` is lazy: one ``map_batches(..., batch_format="pandas")``
   over a frozen copy of the fitted preprocessor, so it fuses with the maps
   around it into one task per block. ``transform_batch(df)`` runs the same
   ``_transform_pandas(df)`` hook on one pandas batch (serving).

A stateless preprocessor sets ``_is_fittable = False``: its ``fit`` only
validates, and ``transform`` works without it. Subclasses implement
``_fit`` (if fittable) and ``_transform_pandas``.
"""

from __future__ import annotations

import copy
import inspect
import pickle
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import pandas as pd

from ...errors import AirflowlessError
from ..block import BatchTypeError
from ..transforms import ColumnNotFoundError
from ._validation import Constraint, validate_params

if TYPE_CHECKING:
    from os import PathLike

    from ..dataset import Dataset

__all__ = ["Preprocessor", "NotFittedError", "PreprocessorLoadError"]

P = TypeVar("P", bound="Preprocessor")


class NotFittedError(AirflowlessError, ValueError, AttributeError):
    """``transform``, ``transform_batch`` or ``stats_`` on a preprocessor that has learned nothing yet.

    Also an ``AttributeError`` (as scikit-learn's), so ``hasattr(p, "stats_")`` is False before fit.
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        super().__init__(f"This {owner} is not fitted yet: call {owner}.fit(dataset) (or fit_transform) "
                         "before transform, transform_batch or stats_.")

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.owner,))


class PreprocessorLoadError(AirflowlessError, TypeError):
    """``Preprocessor.load(path)`` found something else than the class asked for."""


class Preprocessor:
    """Base class: see the module docstring for the contract and the hooks."""

    _is_fittable: ClassVar[bool] = True
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}
    #: learned attribute -> the name Ray Data gives its statistic, e.g. ``{"data_min_": "min"}``
    _stat_names: ClassVar[dict[str, str]] = {}

    # -- the public contract ------------------------------------------------------
    def fit(self: P, ds: Dataset) -> P:
        """Validate the parameters, learn the attributes ending in ``_`` from ``ds``; return ``self``."""
        self._validate_params()
        if self._is_fittable:
            for name in self._learned_attributes():
                delattr(self, name)
            self._fit(ds)
        return self

    def transform(self, ds: Dataset) -> Dataset:
        """``ds`` with this preprocessing applied, lazily (one fused map per block)."""
        self._check_ready()
        frozen = copy.copy(self)  # a later fit replaces (never mutates) learned attributes
        return ds.map_batches(_BatchFn(frozen), batch_format=frozen._native_format())

    def fit_transform(self, ds: Dataset) -> Dataset:
        """``fit(ds)`` then ``transform(ds)``."""
        return self.fit(ds).transform(ds)

    @property
    def is_fittable(self) -> bool:
        """Whether ``fit`` learns state (False for a stateless transform, whose ``fit`` only validates).

        The public seam Train reads to decide whether to fit a private copy.

        >>> MinMaxScaler(columns=["x"]).is_fittable, Normalizer(columns=["x"]).is_fittable   # doctest: +SKIP
        (True, False)
        """
        return self._is_fittable

    def transform_batch(self, df: pd.DataFrame) -> pd.DataFrame:
        """The same preprocessing on one pandas batch (serving); the input is not modified."""
        self._check_ready()
        if not isinstance(df, pd.DataFrame):
            raise BatchTypeError(f"{type(self).__name__}.transform_batch takes a pandas DataFrame, "
                                 f"got {type(df).__name__}; wrap it with pandas.DataFrame(...)")
        return self._transform_pandas(df)

    @property
    def stats_(self) -> dict[str, Any]:
        """The fitted statistics keyed as Ray Data's preprocessors key them: ``"<stat>(<column>)"``.

        Derived from the learned attributes (the one source of truth), never stored;
        a list of categories is given as Ray does, ``{category: index}``. Empty for
        a stateless preprocessor; :class:`NotFittedError` before ``fit``.

        >>> MinMaxScaler(columns=["x"]).fit(ds).stats_      # doctest: +SKIP
        {'min(x)': 0.0, 'max(x)': 9.0}
        """
        self._check_ready()
        return {f"{stat}({column})": _ray_value(value)
                for attribute, stat in self._stats_sources().items()
                for column, value in self._per_column(attribute).items()}

    @classmethod
    def _param_names(cls) -> list[str]:
        signature = inspect.signature(cls.__init__)
        return [p.name for p in signature.parameters.values() if p.name != "self"
                and p.kind is not inspect.Parameter.VAR_KEYWORD]

    def get_params(self) -> dict[str, Any]:
        """The constructor arguments, by name (as stored by ``__init__``)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def save(self, path: str | PathLike[str]) -> None:
        """Pickle this preprocessor (with its learned state) to ``path`` (local or an fsspec URL).

        cloudpickle writes it, so functions defined in a notebook (``BatchMapper``)
        survive; the file loads with plain :mod:`pickle`.
        """
        import cloudpickle
        import fsspec

        with fsspec.open(str(path), "wb") as f:
            cloudpickle.dump(self, f)

    @classmethod
    def load(cls: type[P], path: str | PathLike[str]) -> P:
        """The preprocessor saved at ``path``; load only files you trust (this unpickles)."""
        import fsspec

        with fsspec.open(str(path), "rb") as f:
            obj = pickle.load(f)
        if not isinstance(obj, cls):
            raise PreprocessorLoadError(f"{path} holds a {type(obj).__name__}, not a {cls.__name__}; "
                                        f"load it with the matching class (or Preprocessor.load)")
        return obj

    def __repr__(self) -> str:
        signature = inspect.signature(type(self).__init__)
        parts = []
        for p in signature.parameters.values():
            if p.name == "self":
                continue
            value = getattr(self, p.name)
            if p.kind is inspect.Parameter.VAR_POSITIONAL:
                parts += [_short_repr(v) for v in value]
            elif p.default is inspect.Parameter.empty or not _same(value, p.default):
                parts.append(f"{p.name}={_short_repr(value)}")
        return f"{type(self).__name__}({', '.join(parts)})"

    # -- hooks for subclasses -----------------------------------------------------
    def _fit(self, ds: Dataset) -> None:
        """Set the learned attributes (names ending in ``_``) from ``ds``."""
        raise NotImplementedError(f"{type(self).__name__} is fittable but does not implement _fit")

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        """The transform of one pandas batch; return a new frame, do not modify ``df``."""
        raise NotImplementedError

    def _stats_sources(self) -> dict[str, str]:
        """Learned attribute -> Ray's statistic name, for :attr:`stats_` (``_stat_names`` by default)."""
        return self._stat_names

    def _per_column(self, attribute: str) -> dict[str, Any]:
        """The learned ``attribute`` as {column: value} (learned attributes are per-column dicts)."""
        return dict(getattr(self, attribute))

    def _native_format(self) -> str:
        """The batch format ``transform`` maps with."""
        return "pandas"

    def _transform_native(self, batch: Any) -> Any:
        """The transform of one batch in :meth:`_native_format` (run on the workers)."""
        return self._transform_pandas(batch)

    # -- helpers --------------------------------------------------------------------
    def _validate_params(self) -> None:
        validate_params(type(self).__name__, self.get_params(), self._parameter_constraints)

    def _learned_attributes(self) -> list[str]:
        return [name for name in vars(self) if name.endswith("_") and not name.startswith("_")]

    def _check_ready(self) -> None:
        """Raise unless ``transform`` can run: fitted, or stateless with valid parameters."""
        if not self._is_fittable:
            self._validate_params()
        elif not self._learned_attributes():
            raise NotFittedError(type(self).__name__)

    def _require_columns(self, df: pd.DataFrame, columns: Sequence[str]) -> None:
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ColumnNotFoundError(f"{type(self).__name__}: column(s) {missing} not found; "
                                      f"the batch has columns {list(df.columns)}")


class _BatchFn:
    """What ``transform`` maps: a frozen, picklable copy of a preprocessor; named after it in plans."""

    def __init__(self, preprocessor: Preprocessor) -> None:
        self.preprocessor = preprocessor
        self.__name__ = type(preprocessor).__name__

    def __call__(self, batch: Any) -> Any:
        return self.preprocessor._transform_native(batch)


def _ray_value(value: Any) -> Any:
    """A statistic as Ray reports it: a list of categories becomes ``{category: index}``."""
    return {v: i for i, v in enumerate(value)} if isinstance(value, list) else value


def _same(value: Any, default: Any) -> bool:
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:
        return False


def _short_repr(value: Any) -> str:
    if callable(value) and not isinstance(value, Preprocessor) and hasattr(value, "__qualname__"):
        return str(value.__qualname__)
    return repr(value)
