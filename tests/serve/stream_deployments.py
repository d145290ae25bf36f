"""Deployments that stream and a FastAPI ingress, importable on the workers (tests/serve/test_streaming.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import StreamingResponse

from airflowless import serve


@serve.deployment
class Tokens:
    """Generators, plain and async, and a StreamingResponse; ``produced`` counts items made per stream."""

    def __init__(self) -> None:
        self.produced: dict[str, int] = {}
        self.closed: set[str] = set()

    def generate(self, n: int) -> Iterator[str]:
        for i in range(n):
            yield f"token-{i}"

    async def agenerate(self, n: int) -> AsyncIterator[dict[str, int]]:
        for i in range(n):
            await asyncio.sleep(0)
            yield {"i": i}

    def failing(self, n: int) -> Iterator[int]:
        yield from range(n)
        raise ValueError(f"broke after {n}")

    async def endless(self, key: str) -> AsyncIterator[int]:
        """Counts how far a producer got ahead of its reader, and whether it was closed."""
        self.produced[key] = 0
        try:
            while True:
                self.produced[key] += 1
                yield self.produced[key]
                await asyncio.sleep(0.001)
        finally:
            self.closed.add(key)

    def progress(self, key: str) -> tuple[int, bool]:
        return self.produced.get(key, 0), key in self.closed

    def one_value(self) -> int:
        return 1

    def __call__(self, request: Request) -> StreamingResponse:
        n = int(request.query_params.get("n", "3"))

        def lines() -> Iterator[str]:
            for i in range(n):
                yield f"line {i}\n"
                time.sleep(0.01)
        return StreamingResponse(lines(), media_type="text/event-stream", headers={"x-lines": str(n)})


app = FastAPI(title="Items")


class Item(BaseModel):
    name: str
    price: float


def get_tax() -> float:
    return 0.5


@app.get("/health")
def health() -> dict[str, str]:
    """A route written outside the class: served as it is."""
    return {"status": "ok"}


@serve.deployment(num_replicas=1)
@serve.ingress(app)
class Items:
    def __init__(self, currency: str) -> None:
        self.currency = currency
        self.items: dict[int, Item] = {}

    @app.get("/items/{item_id}")
    def get_item(self, item_id: int, q: str = "") -> dict[str, Any]:
        if item_id not in self.items:
            raise HTTPException(status_code=404, detail=f"no item {item_id}")
        return {"item": self.items[item_id].model_dump(), "q": q, "currency": self.currency}

    @app.post("/items/{item_id}", status_code=201)
    async def put_item(self, item_id: int, item: Item, tax: float = Depends(get_tax)) -> dict[str, Any]:
        self.items[item_id] = item
        return {"id": item_id, "with_tax": item.price * (1 + tax)}

    @app.get("/count")
    def count(self) -> StreamingResponse:
        def numbers() -> Iterator[str]:
            for i in range(4):
                yield f"{i}\n"
        return StreamingResponse(numbers(), media_type="text/plain")

    def size(self) -> int:
        """Not a route: a handle may still call it."""
        return len(self.items)


class Model:
    """A loaded model; ``unloaded`` is appended to when the replica drops it."""

    def __init__(self, model_id: str, unloaded: list[str]) -> None:
        self.model_id, self._unloaded = model_id, unloaded

    def __del__(self) -> None:
        self._unloaded.append(self.model_id)


@serve.deployment(num_replicas=2)
class Models:
    def __init__(self) -> None:
        self.loads: list[str] = []
        self.unloaded: list[str] = []

    @serve.multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str) -> Model:
        self.loads.append(model_id)
        await asyncio.sleep(0.05)  # concurrent calls for one model share this load
        return Model(model_id, self.unloaded)

    async def __call__(self, body: Any) -> dict[str, Any]:
        model = await self.get_model(serve.get_multiplexed_model_id())
        return {"model": model.model_id, "x": body["x"] if body else None, "replica": id(self)}

    def sync_id(self) -> str:
        """A plain method sees the model id too (it runs in the replica's thread)."""
        return serve.get_multiplexed_model_id()

    def history(self) -> dict[str, Any]:
        return {"loads": list(self.loads), "unloaded": list(self.unloaded), "replica": id(self)}


@serve.deployment(num_replicas=2)
class ManyModels:
    """Room for every model: a model is loaded again only where a router did not know it was loaded."""

    def __init__(self) -> None:
        self.loads: list[str] = []

    @serve.multiplexed(max_num_models_per_replica=16)
    async def get_model(self, model_id: str) -> str:
        self.loads.append(model_id)
        return model_id

    async def __call__(self, body: Any) -> int:
        await self.get_model(serve.get_multiplexed_model_id())
        return id(self)

    def history(self) -> dict[str, Any]:
        return {"replica": id(self), "loads": list(self.loads)}


def call_each_model_from_here(handle: serve.DeploymentHandle, model_ids: list[str]) -> dict[str, int]:
    """Run as a Dask task: a worker's own router, which never sent these models anywhere, calls each once."""
    return {m: handle.options(multiplexed_model_id=m).remote(None).result(timeout=30) for m in model_ids}


@serve.deployment(num_replicas=2, max_ongoing_requests=2)
class BusyModels:
    """Slow calls and room for two at a time: a model's calls spill to the other replica when its home is full."""

    @serve.multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str) -> str:
        return model_id

    async def __call__(self, body: Any) -> int:
        await self.get_model(serve.get_multiplexed_model_id())
        await asyncio.sleep(0.3)
        return id(self)
