"""airflowless: an ML pipeline engine on Dask.

>>> import airflowless
>>> from airflowless import pipeline, stage

Names are loaded on first use, so ``import airflowless`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "init": "airflowless.runtime",
    "shutdown": "airflowless.runtime",
    "get_client": "airflowless.runtime",
    "is_initialized": "airflowless.runtime",
    "cluster_client": "airflowless.runtime",
    "stage": "airflowless.dag",
    "pipeline": "airflowless.dag",
    "load_pipeline": "airflowless.dag",
    "RunResult": "airflowless.dag",
    "open_store": "airflowless.store",
    "Skip": "airflowless.errors",
}
_SUBMODULES = {"dag", "runtime", "store", "datasets", "errors", "settings", "cli", "data", "train", "tune", "serve"}

__all__ = sorted([*_LAZY, *_SUBMODULES, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"airflowless.{name}")
    raise AttributeError(f"module 'airflowless' has no attribute {name!r}")
