"""Ray Serve quick start: a deployment calling another through a handle, and an HTTP call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from airflowless import serve  # Ray: from ray import serve
from airflowless.serve import DeploymentHandle  # Ray: from ray.serve.handle import DeploymentHandle


@serve.deployment
class Adder:
    def __init__(self, increment: int) -> None:
        self.increment = increment

    def add(self, value: int) -> int:
        return value + self.increment


@serve.deployment(num_replicas=2)
class Ingress:
    def __init__(self, adder: DeploymentHandle) -> None:
        self.adder = adder

    async def __call__(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        total = await self.adder.add.remote(body["value"])
        return {"result": total}


@pytest.fixture
def served(cluster_client: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AIRFLOWLESS_HOME", str(tmp_path))  # the deployments' record goes to a private store
    serve.start(http_options={"port": 0})
    yield
    serve.shutdown()


@pytest.mark.usefixtures("served")
def test_serve_quickstart() -> None:
    # ---- the program, as in Ray's docs ----
    app = Ingress.bind(Adder.bind(increment=2))
    serve.run(app, name="adder_app", route_prefix="/add")
    response = httpx.post(f"{serve.http_address()}/add", json={"value": 40})

    handle: DeploymentHandle = serve.run(Adder.bind(increment=10), name="adder_only", route_prefix=None)
    answers = [handle.add.remote(i) for i in range(5)]
    totals = [answer.result() for answer in answers]
    # ----------------------------------------

    assert response.status_code == 200 and response.json() == {"result": 42}
    assert totals == [10, 11, 12, 13, 14]
