"""The store tests run against both backends: an SQLite file and a fresh PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflowless.store import Store, open_store


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty store: an SQLite file in tmp, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def db(backend_url: str) -> Iterator[Store]:
    store = open_store(backend_url)
    yield store
    store.close()
