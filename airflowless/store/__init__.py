"""The record: pipeline runs and stage runs (experiments and trials join later).

SQLite file by default (``~/.airflowless/airflowless.db``, or ``AIRFLOWLESS_DB``),
PostgreSQL by URL. Importing this package pulls in SQLAlchemy, so the runtime
start path never imports it.
"""

from .records import RunRecord, RunStatus, StageRecord, StageStatus
from .store import Store, open_store

__all__ = ["Store", "open_store", "RunRecord", "StageRecord", "RunStatus", "StageStatus"]
