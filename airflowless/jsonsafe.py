"""What the record stores as JSON: plain values, and never NaN or infinity.

JSON has no NaN or infinity. SQLite would store them as non-standard text that
other readers reject, and PostgreSQL refuses them. So every JSON value the
store takes passes through here, one rule for all:

- parameters (and anything else a user hands in to be kept as given) are
  checked with :func:`require_finite`, which refuses a non-finite number
  before anything starts;
- reported values (metrics, configs recorded along the way) are made plain
  with :func:`to_plain`, which turns numpy scalars into Python numbers and
  records a non-finite number as ``null`` (a diverged loss is "no value");
- :func:`dumps` is the store's serializer and refuses what slipped through.

>>> import numpy as np
>>> to_plain({"loss": np.float32(0.5), "steps": [np.int64(3)], "bad": float("inf")})
{'loss': 0.5, 'steps': [3], 'bad': None}
>>> non_finite_path({"p": {"eta": [0.1, float("nan")]}})
"p['eta'][1]"
"""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import NonFiniteValueError

__all__ = ["to_plain", "non_finite_path", "require_finite", "dumps"]


def to_plain(value: Any) -> Any:
    """``value`` with numpy scalars as Python values, other objects as text, non-finite numbers as None."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if type(value).__module__ == "numpy" and getattr(value, "dtype", None) is not None and value.dtype.kind == "b":
        return bool(value)
    if value is None or isinstance(value, (str, bool)):
        return str(value) if isinstance(value, str) and type(value) is not str else value
    if isinstance(value, float):  # numpy.float64 is a float subclass: make it exactly float
        return float(value) if math.isfinite(value) else None
    if isinstance(value, int):
        return int(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return to_plain(item())
        except (TypeError, ValueError):
            pass
    return repr(value)


def _find(value: Any, path: str) -> tuple[str, float] | None:
    if isinstance(value, dict):
        items: Any = ((f"{path}[{k!r}]" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return (path or "the value", value) if isinstance(value, float) and not math.isfinite(value) else None
    for where, item in items:
        found = _find(item, where)
        if found is not None:
            return found
    return None


def non_finite_path(value: Any) -> str | None:
    """Where in ``value`` a NaN or infinity sits (``"key[0]"``), or None if nowhere."""
    found = _find(value, "")
    return None if found is None else found[0]


def require_finite(values: dict[str, Any], *, what: str) -> None:
    """Refuse ``values`` (e.g. a run's parameters) if a number in them is NaN or infinite."""
    found = _find(values, "")
    if found is not None:
        raise NonFiniteValueError(what, *found)


def dumps(value: Any) -> str:
    """Standard JSON text of ``value``; ValueError on NaN or infinity (the store's serializer).

    Dates and paths, which pipeline parameters may be, are written as their text (ISO 8601, the path).
    """
    return json.dumps(value, allow_nan=False, default=_as_text)


def _as_text(value: Any) -> str:
    from datetime import date
    from pathlib import PurePath

    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
