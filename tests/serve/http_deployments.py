"""Deployments of the HTTP surface tests (importable by workers: they are pickled by reference)."""

from __future__ import annotations

import asyncio
from typing import Any

import torch
from starlette.requests import Request

from airflowless import serve


@serve.deployment
class TorchModel(torch.nn.Module):
    """A torch module as a deployment: nn.Module brings ~50 public methods, none of which may be a route."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[2.0, 3.0]]))
            self.linear.bias.fill_(1.0)

    def forward(self, body: Any) -> dict[str, Any]:
        with torch.no_grad():
            return {"y": self.linear(torch.tensor(body["x"], dtype=torch.float32)).tolist()}

    @serve.route("/predict")
    def predict(self, body: Any) -> dict[str, Any]:
        return self(body)

    def weight_device(self) -> str:
        return str(self.linear.weight.device)


@serve.deployment
class Plain:
    def __call__(self, body: Any) -> Any:
        return body

    @serve.route("/v1/double")
    def double(self, body: Any) -> Any:
        return {"y": 2 * body["x"]}


@serve.deployment
class Gate:
    """Requests wait until the gate is opened through a handle (``open`` is no HTTP route)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def __call__(self, body: Any) -> dict[str, Any]:
        await self.event.wait()
        return {"ok": True}

    async def open(self) -> None:
        self.event.set()


@serve.deployment
class WithRequest:
    """Ray Serve's ingress form: ``__call__`` takes the Starlette request."""

    async def __call__(self, request: Request) -> dict[str, Any]:
        return {"json": await request.json(), "query": dict(request.query_params),
                "token": request.headers.get("x-token"), "path": request.url.path, "method": request.method}

    @serve.route("/raw")
    async def raw(self, request: Request) -> dict[str, Any]:
        return {"bytes": len(await request.body())}


@serve.deployment
class Answers:
    """Ray Serve's ways to answer: text, a Starlette response with its status, headers and cookies, bytes."""

    async def __call__(self, request: Request) -> Any:
        from starlette.responses import JSONResponse, PlainTextResponse

        kind = request.query_params.get("kind", "")
        if kind == "text":
            return f"hello {request.url.path}"
        if kind == "created":
            response = JSONResponse({"id": 7}, status_code=201, headers={"Location": "/items/7"})
            response.set_cookie("session", "abc")
            return response
        if kind == "plain":
            return PlainTextResponse("teapot", status_code=418)
        if kind == "bytes":
            return b"\x00\x01"
        return {"path": request.url.path, "query": dict(request.query_params)}


@serve.deployment
class Pre:
    def __call__(self, body: Any) -> list[float]:
        return [float(v) for v in body["x"]]


@serve.deployment
class Post:
    def __call__(self, values: list[float]) -> dict[str, Any]:
        return {"sum": sum(values)}


@serve.deployment
class Chain:
    def __init__(self, pre: Any, post: Any) -> None:
        self.pre, self.post = pre, post

    async def __call__(self, body: Any) -> Any:
        return await self.post.remote(self.pre.remote(body))
