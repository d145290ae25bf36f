"""The store tests run against both backends: an SQLite file and a fresh PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflowless.store import Store, open_store


@pytest.fixture
def db(backend_url: str) -> Iterator[Store]:
    store = open_store(backend_url)
    yield store
    store.close()
