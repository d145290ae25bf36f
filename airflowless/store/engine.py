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

__all__ = ["make_engine", "read_only"]

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


def read_only(engine: Engine) -> bool:
    """Whether ``engine`` reads a record that cannot be written here (an SQLite file on a read-only disk,
    or one this user may not write, opened ``mode=ro`` by :func:`make_engine`): read as it is, never migrated."""
    return engine.url.get_backend_name() == "sqlite" and engine.url.query.get("mode") == "ro"


def _prepare_sqlite(engine: Engine, *, writable: bool = True) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let SQLAlchemy's begin event issue BEGIN
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_MS}")
        if writable:
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
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writable else "BEGIN")


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


def _cannot_write(database: Path) -> bool:
    """An existing record this process cannot write: its file, or the folder its journal files go in."""
    return database.exists() and not (os.access(database, os.W_OK) and os.access(database.parent, os.W_OK))


def _unshared(database: Path) -> bool:
    """Whether nobody can be writing ``database`` now: its disk is read-only (SQLite may then skip locking)."""
    try:
        return bool(os.statvfs(database).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _say_disk_errors(engine: Engine, where: str) -> None:
    """A write the record's disk refuses (full, read-only) is one :class:`StoreError` saying so and where,
    not the database driver's traceback."""

    @event.listens_for(engine, "handle_error")
    def _on_error(context: Any) -> StoreError | None:
        text = str(context.original_exception).lower()
        if "disk is full" in text or "no space left" in text or "could not extend file" in text:
            return StoreError(f"the record at {where} cannot be written: the disk that holds it is full; free "
                              "space there (a run that was going is shown abandoned; resume it with --resume)")
        if "readonly database" in text or "read-only file system" in text:
            return StoreError(f"the record at {where} is read-only here: it can be read (runs list, ui) but not "
                              "written; record runs in another (AIRFLOWLESS_DB or --db)")
        return None


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
        writable = True
        if parsed.database and parsed.database != ":memory:":
            database = Path(parsed.database).expanduser()
            writable = not _cannot_write(database)
            if writable:
                _create_private(database)
            else:  # read as it is: no WAL files can be made beside it (a read-only disk: nobody writes it)
                parsed = parsed.set(database=f"file:{database}", query={
                    "uri": "true", "mode": "ro", **({"immutable": "1"} if _unshared(database) else {})})
            # one connection kept per process; more open while threads write at once, closed after
            engine = create_engine(parsed, poolclass=QueuePool, pool_size=1, max_overflow=-1,
                                   connect_args={"factory": _OwnedConnection}, json_serializer=dumps)
        else:  # in memory: one connection holds the database, so keep that one
            engine = create_engine(parsed, poolclass=StaticPool, connect_args={"check_same_thread": False},
                                   json_serializer=dumps)
        _prepare_sqlite(engine, writable=writable)
        _say_disk_errors(engine, str(parsed.database).removeprefix("file:"))
        # many rows inserted at once go as one multi-row INSERT, not one SQLite step each (a Tune
        # flush writes every report it heard; each step gives up the GIL to the scheduler's loop)
        engine.dialect.use_insertmanyvalues_wo_returning = True
        return engine
    try:
        engine = create_engine(parsed, pool_pre_ping=True, pool_size=2, max_overflow=2, json_serializer=dumps)
        _say_disk_errors(engine, parsed.render_as_string(hide_password=True))
        return engine
    except ModuleNotFoundError as exc:
        raise StoreError(
            f"the driver for {backend!r} is not installed ({exc.name}); "
            "install it, e.g. pip install 'airflowless[postgres]'"
        ) from exc
