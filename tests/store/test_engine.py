"""SQLite connections: kept between transactions, set up once, and never shared with a forked process."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

from airflowless.store import Store, open_store


def _raw(store: Store) -> Any:
    """The DBAPI connection the store's next transaction runs on."""
    with store.engine.connect() as conn:
        return conn.connection.dbapi_connection


def test_an_sqlite_connection_is_kept_between_transactions_with_its_settings(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        store.create_run("p", module="m", params={})
        first = _raw(store)
        store.create_run("p", module="m", params={})
        assert _raw(store) is first  # not opened again
        cursor = first.cursor()
        settings = {name: cursor.execute(f"PRAGMA {name}").fetchone()[0]
                    for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")}
        assert settings == {"journal_mode": "wal", "synchronous": 1, "busy_timeout": 30_000, "foreign_keys": 1}
    finally:
        store.close()


def _child_writes(store: Store, parent_connection_id: int, answer: Any) -> None:
    """In a forked process: write through the parent's Store; say on which connection and what was seen."""
    try:
        store.create_run("child", module="m", params={})
        used = _raw(store)
        answer.put({"own": used.owner == os.getpid() and id(used) != parent_connection_id,
                    "runs": store.count_runs()})
        store.close()  # leaves the parent's connection open (only the process that opened one closes it)
    except Exception as exc:  # reported to the test, which fails with it
        answer.put({"error": repr(exc)})


def test_a_forked_process_opens_its_own_connection_and_the_parent_goes_on_with_its_own(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        store.create_run("parent", module="m", params={})
        parent_connection = _raw(store)
        context = multiprocessing.get_context("fork")
        answer = context.Queue()
        child = context.Process(target=_child_writes, args=(store, id(parent_connection), answer))
        child.start()
        said = answer.get(timeout=60)
        child.join(timeout=60)
        assert said == {"own": True, "runs": 2}, said
        assert child.exitcode == 0

        store.create_run("parent", module="m", params={})  # the parent's kept connection still works
        assert _raw(store) is parent_connection
        assert sorted(r.pipeline for r in store.list_runs()) == ["child", "parent", "parent"]
    finally:
        store.close()
