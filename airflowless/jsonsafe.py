"""Making values JSON- and msgpack-safe: numpy scalars to Python numbers, the rest to text.

>>> import numpy as np
>>> to_plain({"loss": np.float32(0.5), "steps": [np.int64(3)]})
{'loss': 0.5, 'steps': [3]}
"""

from __future__ import annotations

from typing import Any

__all__ = ["to_plain"]


def to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if type(value).__module__ == "numpy" and getattr(value, "dtype", None) is not None and value.dtype.kind == "b":
        return bool(value)
    if value is None or isinstance(value, (str, bool)):
        return str(value) if isinstance(value, str) and type(value) is not str else value
    if isinstance(value, float):  # numpy.float64 is a float subclass: make it exactly float
        return None if value != value else float(value)
    if isinstance(value, int):
        return int(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return to_plain(item())
        except (TypeError, ValueError):
            pass
    return repr(value)
