"""Which record a stage's code writes to: its run's, not whatever its worker process was started with.

A stage that records something itself (a Tune experiment, a Trainer fit, ``models.register``) opens the
store with ``open_store()``, which reads ``AIRFLOWLESS_DB`` where it runs: on a worker of a shared cluster
that may be another record than the run's (workers started with other settings, a service on PostgreSQL
driving a cluster whose workers know only their SQLite default). So each stage task carries its run's record,
and while the stage's body runs, ``open_store()`` opens that one in its thread; so do the threads it starts (a
Tuner's trials) while every stage running in the process records to the same place. An explicit URL always
wins.

>>> with recording_to("sqlite:////tmp/run.db"):
...     default_record()
'sqlite:////tmp/run.db'
>>> default_record() is None
True
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["recording_to", "default_record"]

_records: dict[int, str] = {}  # thread id -> the record of the run whose stage it runs
_lock = threading.Lock()


@contextlib.contextmanager
def recording_to(url: str | None) -> Iterator[None]:
    """While the block runs, ``open_store()`` in this thread (and, see the module, in threads of its own) opens
    ``url``; nothing changes when ``url`` is None."""
    if url is None:
        yield
        return
    thread = threading.get_ident()
    with _lock:
        before = _records.get(thread)
        _records[thread] = url
    try:
        yield
    finally:
        with _lock:
            if before is None:
                _records.pop(thread, None)
            else:
                _records[thread] = before


def default_record() -> str | None:
    """The record ``open_store()`` opens here now, if a stage says so (else None: the settings decide)."""
    with _lock:
        own = _records.get(threading.get_ident())
        if own is not None:
            return own
        running = set(_records.values())
    return running.pop() if len(running) == 1 else None
