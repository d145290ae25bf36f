"""The record: pipeline runs and stage runs (experiments and trials join later).

SQLite file by default (``~/.airflowless/airflowless.db``, or ``AIRFLOWLESS_DB``),
PostgreSQL by URL. SQLAlchemy is imported only when a store is opened, so
importing stages and pipelines (and unpickling them on workers) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .records import RunRecord, RunStatus, StageRecord, StageStatus

if TYPE_CHECKING:
    from .store import Store, open_store

__all__ = ["Store", "open_store", "RunRecord", "StageRecord", "RunStatus", "StageStatus"]


def __getattr__(name: str) -> Any:
    if name in ("Store", "open_store"):
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module 'airflowless.store' has no attribute {name!r}")
