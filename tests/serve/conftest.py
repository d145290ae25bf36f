"""Serve tests share the session cluster and one serve runtime on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def serve_url(cluster_client: object) -> Iterator[str]:
    from airflowless import serve

    serve.start(http_options={"port": 0})
    yield serve.http_address()
    serve.shutdown()
