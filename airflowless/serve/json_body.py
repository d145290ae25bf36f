"""Strict JSON for the HTTP proxy: what a request body may be, and what a response may be.

A body is parsed with ``json.loads`` only (never unpickled); ``NaN``,
``Infinity`` and numbers that overflow a float (``1e999``) are rejected, and
so is nesting deeper than :data:`MAX_DEPTH` arrays and objects. A result is
written with ``allow_nan=False``, so a response is always valid JSON.

>>> parse(b'{"x": [1, 2.5]}')
{'x': [1, 2.5]}
>>> parse(b'{"x": 1e999}')
Traceback (most recent call last):
...
ValueError: 1e999 is not a finite number
>>> dump({"y": float("inf")})
Traceback (most recent call last):
...
ValueError: Out of range float values are not JSON compliant...
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MAX_DEPTH", "parse", "dump"]

MAX_DEPTH = 64


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _check_depth(value: Any) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > MAX_DEPTH:
            raise ValueError(f"the body nests arrays and objects {MAX_DEPTH + 1} or more deep; "
                             f"at most {MAX_DEPTH} levels are accepted")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def parse(raw: bytes) -> Any:
    """The JSON document in ``raw``; ``ValueError`` (with a message for the client) if it is not acceptable."""
    try:  # json.loads(raw, ...) with keywords would build a decoder per call
        value = _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except RecursionError:
        raise ValueError(f"the body nests arrays and objects too deep; at most {MAX_DEPTH} levels are "
                         "accepted") from None
    if isinstance(value, dict | list):
        _check_depth(value)
    return value


def dump(value: Any) -> bytes:
    """``value`` as compact JSON (numpy and pandas values through their ``tolist``); ``ValueError``/``TypeError``."""
    try:
        return _ENCODER.encode(value).encode()
    except RecursionError:
        raise ValueError("the value nests too deep to write as JSON") from None


def _default(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays, pandas objects
    if callable(tolist):
        return tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_constant=_reject_constant)
_ENCODER = json.JSONEncoder(default=_default, allow_nan=False, separators=(",", ":"))
