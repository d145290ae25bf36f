"""Deployments used by the tests (importable by workers: they are pickled by reference)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from typing import Any

from airflowless import serve


@serve.deployment(num_replicas=2)
class Echo:
    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    def __call__(self, body: Any) -> dict[str, Any]:
        return {"got": body, "suffix": self.suffix, "pid": os.getpid()}

    @serve.route
    async def shout(self, body: Any) -> dict[str, Any]:
        return {"up": str(body).upper()}


@serve.deployment
class Ingress:
    def __init__(self, echo: Any) -> None:
        self.echo = echo

    async def __call__(self, body: Any) -> dict[str, Any]:
        inner = await self.echo.remote(body)
        loud = await self.echo.shout.remote("hi")
        return {"via": inner, "loud": loud}


@serve.deployment
class SyncIngress:
    """Ray's sync composition: a plain ``def`` waits for another deployment with ``.result()``."""

    def __init__(self, echo: Any) -> None:
        self.echo = echo

    def __call__(self, body: Any) -> dict[str, Any]:
        return {"via": self.echo.remote(body).result(timeout=30), "loud": self.echo.shout.remote("hi").result()}


@serve.deployment
def double(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("x"), int | float):
        raise serve.BadRequestError(f"expected {{'x': number}}, got {type(body).__name__}")
    return {"y": 2 * body["x"]}


@serve.deployment(max_ongoing_requests=1, max_queued_requests=1)
class Slow:
    async def __call__(self, body: Any) -> dict[str, Any]:
        await asyncio.sleep(0.5)
        return {"ok": True}


@serve.deployment
class Batched:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)
    async def __call__(self, bodies: list[Any]) -> list[Any]:
        self.sizes.append(len(bodies))
        return [{"x": b["x"], "batch": len(bodies)} for b in bodies]


@serve.deployment(autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 2,
                                      "upscale_delay_s": 0.5, "downscale_delay_s": 1.0})
class Busy:
    async def __call__(self, body: Any) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"pid": os.getpid()}


@serve.deployment(num_replicas=2, health_check_period_s=0.5)
class Worky:
    def __init__(self) -> None:
        self.replica = uuid.uuid4().hex  # a replacement replica answers with a new one, even in the same process

    def __call__(self, body: Any) -> dict[str, Any]:
        time.sleep(0.002)
        return {"pid": os.getpid(), "replica": self.replica}


@serve.deployment
class Broken:
    def __init__(self) -> None:
        raise RuntimeError("cannot load the model")


@serve.deployment(num_replicas=2, health_check_period_s=0.5)
class HangsSync:
    """Hangs its one thread for ``{"hang": seconds}``; answers with its replica otherwise."""

    def __init__(self) -> None:
        self.replica = uuid.uuid4().hex

    def __call__(self, body: Any) -> dict[str, Any]:
        if isinstance(body, dict) and body.get("hang"):
            time.sleep(float(body["hang"]))
        return {"replica": self.replica}


@serve.deployment(max_ongoing_requests=4, max_queued_requests=0)
class HangsAsync:
    """Awaits for ever on ``{"hang": ...}``; ``GET`` says how many calls run and how many were cancelled."""

    def __init__(self) -> None:
        self.running = 0
        self.cancelled = 0

    async def __call__(self, body: Any) -> dict[str, Any]:
        if body is None:
            return {"running": self.running, "cancelled": self.cancelled}
        if isinstance(body, dict) and body.get("hang"):
            self.running += 1
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            finally:
                self.running -= 1
        return {"ok": True}


@serve.deployment(max_concurrency=4)
class Threaded:
    """Sleeps ``seconds`` in a plain ``def``; says which thread ran it and how many ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def __call__(self, seconds: float) -> dict[str, Any]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(seconds)
        with self.lock:
            self.running -= 1
        return {"thread": threading.current_thread().name, "most": self.most}
