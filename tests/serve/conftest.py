"""Serve tests share the session cluster and one serve runtime on a free loopback port.

``serve.run`` records its deployments in the store, so each test module gets a
private AIRFLOWLESS_HOME (and so a private SQLite store) for as long as its
serve runtime lives.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module", autouse=True)
def serve_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("serve-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOWLESS_HOME", str(home))
        for name in ("AIRFLOWLESS_DB", "AIRFLOWLESS_STORAGE"):
            patch.delenv(name, raising=False)
        yield home


@pytest.fixture(scope="module")
def serve_url(cluster_client: object) -> Iterator[str]:
    from airflowless import serve

    serve.start(http_options={"port": 0})
    yield serve.http_address()
    serve.shutdown()
