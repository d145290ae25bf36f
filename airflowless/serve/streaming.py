"""Answers that stream: what a replica turns into a :class:`.wire.Stream`, and how the proxy sends one over HTTP.

A deployment method streams, as in Ray Serve, when it is a generator (plain
or ``async``) or returns a Starlette ``StreamingResponse``; a FastAPI ingress
streams when its route does (:mod:`.ingress`). A plain generator's items are
pulled one at a time in the replica's thread, so other requests use the
thread between two items. Over HTTP, a ``StreamingResponse`` keeps its status
and headers; a generator's items go out as they come: text as UTF-8, bytes as
they are, anything else as one line of JSON each. Callers of a handle ask
for the stream with ``handle.options(stream=True)``.

>>> import asyncio
>>> async def numbers():
...     for i in range(3):
...         yield i
>>> async def take(stream):
...     return [item async for item in stream.items]
>>> asyncio.run(take(as_stream(numbers(), None)))
[0, 1, 2]
>>> as_stream({"not": "a stream"}, None) is None
True
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Generator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from starlette.responses import StreamingResponse

from . import json_body
from .wire import RemoteStream, Stream

__all__ = ["ResponseHead", "as_stream", "http_response"]


@dataclass(frozen=True)
class ResponseHead:
    """The status and headers of a streamed HTTP response, sent before its body."""

    status: int
    raw_headers: list[tuple[bytes, bytes]]


def as_stream(result: Any, executor: Executor | None) -> Stream | None:
    """``result`` as a stream, or None when it is a plain value."""
    if isinstance(result, Stream):
        return result
    if inspect.isasyncgen(result):
        return Stream(result)
    if inspect.isgenerator(result):
        return Stream(_pulled(result, executor))
    if isinstance(result, StreamingResponse):
        items = result.body_iterator if result.background is None else _then(result.body_iterator, result.background)
        return Stream(items, ResponseHead(result.status_code, list(result.raw_headers)))
    return None


async def _pulled(items: Generator[Any, Any, Any], executor: Executor | None) -> AsyncIterator[Any]:
    """The items of a plain generator, each pulled in ``executor``'s thread; closing this closes it."""
    loop, context = asyncio.get_running_loop(), contextvars.copy_context()  # the request's (its model id)
    end = object()
    try:
        step = functools.partial(context.run, next, items, end)
        while (item := await loop.run_in_executor(executor, step)) is not end:
            yield item
    finally:  # in the same one thread, after a step still running (closing it from here would raise)
        with contextlib.suppress(RuntimeError):  # the replica's executor is shut down: it is going away
            loop.run_in_executor(executor, _close, items)


def _close(items: Generator[Any, Any, Any]) -> None:
    with contextlib.suppress(Exception):  # its own error on close has nobody to go to
        items.close()


async def _then(items: AsyncIterable[Any], background: Any) -> AsyncIterator[Any]:
    """``items``, then the response's background task once they all went out (as Starlette runs it)."""
    async for item in items:
        yield item
    await background()


def _chunk(item: Any) -> bytes:
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, bytes | bytearray | memoryview):
        return bytes(item)
    return json_body.dump(item) + b"\n"


def http_response(stream: RemoteStream) -> StreamingResponse:
    """A Starlette ``StreamingResponse`` sending ``stream``'s items as they come; the client leaving ends it."""
    async def body() -> AsyncIterator[bytes]:
        try:
            async for item in stream:
                yield _chunk(item)
        finally:
            await stream.aclose()

    head = stream.head
    if isinstance(head, ResponseHead):
        response = _Streamed(stream, body(), status_code=head.status)
        response.raw_headers = list(head.raw_headers)
        return response
    return _Streamed(stream, body(), media_type="text/plain")


class _Streamed(StreamingResponse):
    """A streaming response that closes its remote stream however it ends, even cancelled before its body began
    (the replica's slot and generator are freed at once)."""

    def __init__(self, stream: RemoteStream, content: Any, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._stream = stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._stream.aclose()
