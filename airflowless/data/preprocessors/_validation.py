"""Parameter validation for preprocessors: declared constraints and one error wording.

Each preprocessor class declares ``_parameter_constraints`` (parameter name ->
:class:`Constraint`); :meth:`Preprocessor.fit` checks them all with
:func:`validate_params`, so every bad parameter is reported the same way:

>>> validate_params("MinMaxScaler", {"columns": "a"}, {"columns": COLUMNS})
Traceback (most recent call last):
...
airflowless.data.preprocessors._validation.InvalidParameterError: The 'columns' parameter of MinMaxScaler must be a non-empty list of distinct column names (str); got 'a' instead. Pass a valid value to MinMaxScaler(...) and call it again.
"""

from __future__ import annotations

import numbers
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import AirflowlessError

__all__ = ["InvalidParameterError", "Constraint", "validate_params", "one_of", "COLUMNS", "COLUMN",
           "CALLABLE", "ANY", "DTYPE_OR_NONE", "PERCENTILE_RANGE"]


class InvalidParameterError(AirflowlessError, ValueError):
    """A preprocessor parameter has a value it cannot use; raised by ``fit`` (or a stateless ``transform``)."""

    def __init__(self, owner: str, name: str, expected: str, got: Any) -> None:
        self.owner = owner
        self.name = name
        self.expected = expected
        self.got = got
        super().__init__(
            f"The {name!r} parameter of {owner} must be {expected}; got {reprlib.repr(got)} instead. "
            f"Pass a valid value to {owner}(...) and call it again.")

    def __reduce__(self) -> tuple[type, tuple[str, str, str, Any]]:
        return (type(self), (self.owner, self.name, self.expected, self.got))


@dataclass(frozen=True)
class Constraint:
    """What a parameter must be: a description (used in the error) and a check."""

    description: str
    check: Callable[[Any], bool]

    def __call__(self, value: Any) -> bool:
        try:
            return bool(self.check(value))
        except Exception:  # a check that cannot even look at the value: not valid
            return False


def validate_params(owner: str, params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> None:
    """Raise :class:`InvalidParameterError` for the first parameter that breaks its constraint."""
    for name, value in params.items():
        constraint = constraints.get(name)
        if constraint is not None and not constraint(value):
            raise InvalidParameterError(owner, name, constraint.description, value)


def one_of(*options: Any) -> Constraint:
    """Exactly one of ``options`` (compared by type and value)."""
    return Constraint(f"one of {list(options)}",
                      lambda v: any(type(v) is type(o) and v == o for o in options))


def _is_columns(value: Any) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(c, str) and c for c in value) and len(set(value)) == len(value))


def _is_dtype(value: Any) -> bool:
    import numpy as np

    return value is None or np.dtype(value) is not None


def _is_percentile_range(value: Any) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(q, numbers.Real) and not isinstance(q, bool) for q in value)
            and 0 <= value[0] <= value[1] <= 100)


COLUMNS = Constraint("a non-empty list of distinct column names (str)", _is_columns)
COLUMN = Constraint("a column name (a non-empty str)", lambda v: isinstance(v, str) and v != "")
CALLABLE = Constraint("a callable", callable)
ANY = Constraint("any value", lambda v: True)
DTYPE_OR_NONE = Constraint("None or a numpy dtype (e.g. 'float32')", _is_dtype)
PERCENTILE_RANGE = Constraint("a pair (q_min, q_max) with 0 <= q_min <= q_max <= 100", _is_percentile_range)
