"""Shared fixtures: a private AIRFLOWLESS_HOME, a real embedded cluster, real PostgreSQL.

Tests that need a service (PostgreSQL) skip with a reason when it is not
there, unless AIRFLOWLESS_REQUIRE_SERVICES=1 (set by .ci/run), where they fail.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

POSTGRES_URL = "postgresql://root@127.0.0.1:5432/test"

# Benchmark cases are scripts run in fresh processes by tests/benchmarks/common_cases.py
# (they read TAXI_PATH and start clusters when imported): --doctest-modules must not import them.
collect_ignore_glob = ["benchmarks/cases/*.py"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--benchmarks", action="store_true", help="run the benchmarks in tests/benchmarks")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--benchmarks"):
        for item in items:  # benchmarks run peers side by side (Ray takes minutes): no 300 s limit
            if "benchmark" in item.keywords:
                item.add_marker(pytest.mark.timeout(7200))
        return
    skip = pytest.mark.skip(reason="benchmark: run with --benchmarks")
    for item in items:
        if "benchmark" in item.keywords:
            item.add_marker(skip)


def require_service(name: str, reason: str) -> None:
    """Skip (on a laptop) or fail (in CI) when a service a test needs is missing."""
    from airflowless.settings import get_settings

    if get_settings().require_services:
        pytest.fail(f"{name} is required here (AIRFLOWLESS_REQUIRE_SERVICES=1) but {reason}")
    pytest.skip(f"{name} not available: {reason}")


def require_module(name: str) -> object:
    """Import an optional package, or skip (on a laptop) / fail (in CI) when it is missing."""
    import importlib

    from airflowless.settings import get_settings

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if get_settings().require_services:
            pytest.fail(f"the {name} package is required here (AIRFLOWLESS_REQUIRE_SERVICES=1): {exc}")
        pytest.skip(f"the {name} package is not installed: {exc}", allow_module_level=True)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private AIRFLOWLESS_HOME (store file, storage, cluster state) for one test."""
    monkeypatch.setenv("AIRFLOWLESS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AIRFLOWLESS_DB", raising=False)
    monkeypatch.delenv("AIRFLOWLESS_STORAGE", raising=False)
    monkeypatch.delenv("AIRFLOWLESS_ADDRESS", raising=False)
    return tmp_path / "home"


@pytest.fixture(scope="session")
def cluster_client() -> Iterator[object]:
    """One embedded cluster (2 worker processes) shared by the tests of a session."""
    import airflowless

    client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
    yield client
    airflowless.shutdown()


@pytest.fixture
def store(home: Path):  # noqa: ANN201
    from airflowless.store import open_store

    db = open_store(f"sqlite:///{home / 'test.db'}")
    yield db
    db.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty store: an SQLite file in tmp, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh schema in the real PostgreSQL at 127.0.0.1:5432, dropped afterwards."""
    try:
        import sqlalchemy as sa

        admin = sa.create_engine(POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://"))
        with admin.connect() as conn:
            conn.execute(sa.text("select 1"))
    except Exception as exc:  # not running, or no driver
        require_service("PostgreSQL at 127.0.0.1:5432", f"cannot connect ({exc.__class__.__name__}: {exc})")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
