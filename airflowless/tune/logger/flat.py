"""Nested dicts as flat keys, the way Ray's loggers name nested configs and results."""

from __future__ import annotations

from typing import Any

__all__ = ["flatten"]


def flatten(values: dict[str, Any], prefix: str = "", delimiter: str = "/") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}`` (how nested configs and results are logged, as in Ray).

    >>> flatten({"lr": 0.1, "model": {"depth": 3, "act": "relu"}})
    {'lr': 0.1, 'model/depth': 3, 'model/act': 'relu'}
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}{delimiter}", delimiter))
        else:
            out[f"{prefix}{key}"] = value
    return out
