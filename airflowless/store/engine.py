"""Opening the database behind the store: SQLite by default, any SQLAlchemy URL.

SQLite is set up for several processes writing at once: WAL journal, a busy
timeout, and transactions that take the write lock when they begin
(``BEGIN IMMEDIATE``), so two writers queue instead of failing on a lock upgrade.
A commit is kept once it returns even if the process is killed; with WAL it is
not synced to disk each time (``synchronous = NORMAL``), so a power cut may undo
the last commits but never corrupts the file.

Each process keeps its own few SQLite connections open between transactions
(opening one costs as much as a short transaction). A connection belongs to the
process that opened it: a process forked from it never uses it, nor closes it
(closing would drop file locks SQLite keeps per process), and opens its own.
JSON columns are written as standard JSON only (:func:`airflowless.jsonsafe.dumps`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import QueuePool, StaticPool

from ..errors import StoreError
from ..jsonsafe import dumps
from ..private import file_mode, private_folder

__all__ = ["make_engine"]

_SQLITE_BUSY_MS = 30_000
_INHERITED: list[sqlite3.Connection] = []  # connections a forked process got from its parent: kept, unused


class _OwnedConnection(sqlite3.Connection):
    """An SQLite connection that only the process which opened it closes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner = os.getpid()

    def close(self) -> None:
        if self.owner == os.getpid():
            super().close()
        else:  # the parent still uses it; closing here would release the parent's locks on the file
            _INHERITED.append(self)


def _prepare_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let SQLAlchemy's begin event issue BEGIN
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_MS}")
        _use_wal(cursor)
        cursor.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable across a killed process
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if getattr(dbapi_conn, "owner", os.getpid()) != os.getpid():  # pooled before a fork: open a new one
            raise DisconnectionError("an SQLite connection of the parent process is not used after fork")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _use_wal(cursor: Any) -> None:
    # Turning a new file to WAL needs an exclusive lock, and SQLite answers "database
    # is locked" at once, without the busy timeout, to connections doing it together.
    deadline = time.monotonic() + _SQLITE_BUSY_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _create_private(database: Path) -> None:
    """Create the SQLite file ``database`` (and its folder) private to this user, unless it exists.

    An empty file is an empty SQLite database; made here with its mode, the
    record's ``-wal`` and ``-shm`` files get that mode from SQLite too.
    """
    if not database.parent.exists():
        private_folder(database.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode()))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; creates the folder of an SQLite file if needed."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy raises ArgumentError
        raise StoreError(
            f"the store URL {url!r} is not a database URL; expected e.g. "
            "'sqlite:////path/airflowless.db' or 'postgresql://user@host:5432/db' "
            "(set AIRFLOWLESS_DB)"
        ) from exc
    backend = parsed.get_backend_name()
    if backend == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _create_private(Path(parsed.database).expanduser())
            # one connection kept per process; more open while threads write at once, closed after
            engine = create_engine(parsed, poolclass=QueuePool, pool_size=1, max_overflow=-1,
                                   connect_args={"factory": _OwnedConnection}, json_serializer=dumps)
        else:  # in memory: one connection holds the database, so keep that one
            engine = create_engine(parsed, poolclass=StaticPool, connect_args={"check_same_thread": False},
                                   json_serializer=dumps)
        _prepare_sqlite(engine)
        # many rows inserted at once go as one multi-row INSERT, not one SQLite step each (a Tune
        # flush writes every report it heard; each step gives up the GIL to the scheduler's loop)
        engine.dialect.use_insertmanyvalues_wo_returning = True
        return engine
    try:
        return create_engine(parsed, pool_pre_ping=True, pool_size=2, max_overflow=2, json_serializer=dumps)
    except ModuleNotFoundError as exc:
        raise StoreError(
            f"the driver for {backend!r} is not installed ({exc.name}); "
            "install it, e.g. pip install 'airflowless[postgres]'"
        ) from exc
