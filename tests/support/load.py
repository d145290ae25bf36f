"""HTTP load for serve tests that lasts until the test has seen what it waits for, not for a number of seconds.

>>> from tests.support.load import http_load
>>> with http_load("http://127.0.0.1:8000/app", concurrency=8) as stats:  # doctest: +SKIP
...     eventually(lambda: stats.get("200", 0) > 100)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

__all__ = ["http_load"]


async def _load(url: str, stop: threading.Event, concurrency: int, stats: dict[str, int]) -> None:
    async def one(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            try:
                code = (await client.post(url, json={})).status_code
            except httpx.HTTPError:
                code = 0
            stats[str(code)] = stats.get(str(code), 0) + 1

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(one(client) for _ in range(concurrency)))


@contextmanager
def http_load(url: str, *, concurrency: int) -> Iterator[dict[str, int]]:
    """POST ``{}`` to ``url`` from ``concurrency`` clients until the block ends; yield the counts by status.

    Statuses are strings (``"200"``, ``"503"``; ``"0"`` for a transport error).
    The load stops, and its thread is joined, when the block is left.
    """
    stats: dict[str, int] = {}
    stop = threading.Event()
    loader = threading.Thread(target=lambda: asyncio.run(_load(url, stop, concurrency, stats)),
                              name="http-load", daemon=True)
    loader.start()
    try:
        yield stats
    finally:
        stop.set()
        loader.join()
