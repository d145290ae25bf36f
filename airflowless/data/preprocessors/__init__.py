"""Preprocessors: scikit-learn-style transforms fitted with distributed aggregations.

>>> from airflowless.data.preprocessors import MinMaxScaler
>>> scaler = MinMaxScaler(columns=["trip_distance", "trip_duration"])
>>> train = scaler.fit_transform(train_ds)        # doctest: +SKIP
>>> scaler.transform_batch(request_frame)         # doctest: +SKIP

``fit`` learns attributes ending in ``_`` on the cluster; ``transform`` is a
lazy map that fuses with its neighbours; ``transform_batch`` applies the same
transform to one pandas batch when serving. See :mod:`.base` for the contract.
"""

from ._validation import InvalidParameterError
from .base import NotFittedError, Preprocessor, PreprocessorLoadError
from .batch_mapper import BatchMapper
from .chain import Chain
from .concatenator import Concatenator
from .encoder import LabelEncoder, OneHotEncoder, OrdinalEncoder
from .imputer import SimpleImputer
from .normalizer import Normalizer
from .scaler import MaxAbsScaler, MinMaxScaler, RobustScaler, StandardScaler

__all__ = ["Preprocessor", "NotFittedError", "InvalidParameterError", "PreprocessorLoadError",
           "MinMaxScaler", "StandardScaler", "MaxAbsScaler", "RobustScaler", "Normalizer",
           "OrdinalEncoder", "OneHotEncoder", "LabelEncoder", "SimpleImputer", "Concatenator",
           "Chain", "BatchMapper"]
