"""Streams on the data plane, end to end over a real loopback socket (a WireServer and a WireClient in one loop):
items arrive in order within a window, and a stream whose reader goes away, in any way, stops its producer."""

from __future__ import annotations

import asyncio
import pickle
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflowless.serve.errors import ServeError
from airflowless.serve.wire import (
    STREAM_WINDOW,
    Connection,
    RemoteStream,
    Stream,
    WireClient,
    WireServer,
)


class Unpicklable:
    def __reduce__(self) -> Any:
        return (_refuse, ())


def _refuse() -> None:
    raise RuntimeError("cannot be built here")


class Producer:
    """A server whose ``count`` method streams 0, 1, 2, ...; it records how far it got and whether it closed."""

    def __init__(self) -> None:
        self.made = 0
        self.closed = asyncio.Event()

    async def dispatch(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], connection: Connection,
                       model_id: str = "") -> Any:
        if method == "bad":
            async def bad() -> AsyncIterator[Any]:
                yield Unpicklable()
                while True:
                    await asyncio.sleep(0.01)
                    yield 1
            return Stream(bad(), on_close=self.closed.set)
        return Stream(self._count(args[0]), on_close=self.closed.set)

    async def _count(self, limit: int) -> AsyncIterator[int]:
        for i in range(limit):
            self.made += 1
            yield i


async def _pair(producer: Producer) -> tuple[WireServer, WireClient]:
    token = secrets.token_bytes(32)
    server = WireServer(producer.dispatch, token)
    port = await server.start("127.0.0.1")
    return server, await WireClient.connect("127.0.0.1", port, token)


def test_a_stream_arrives_in_order_and_its_producer_waits_for_the_reader() -> None:
    async def go() -> None:
        producer = Producer()
        server, client = await _pair(producer)
        stream = await client.call("count", (1000,), {})
        assert isinstance(stream, RemoteStream)
        first = [await stream.__anext__() for _ in range(3)]
        await asyncio.sleep(0.2)
        assert first == [0, 1, 2] and producer.made <= 3 + STREAM_WINDOW + 1  # held back by the window
        rest = [item async for item in stream]
        assert first + rest == list(range(1000)) and client.pending == 0
        await asyncio.wait_for(producer.closed.wait(), 5)
        await client.close()
        await server.close()
    asyncio.run(go())


@pytest.mark.parametrize("how", ["closed early", "connection dropped", "item not unpicklable"])
def test_a_stream_whose_reader_goes_away_stops_its_producer(how: str) -> None:
    async def go() -> None:
        producer = Producer()
        server, client = await _pair(producer)
        if how == "item not unpicklable":
            stream = await client.call("bad", (), {})
            with pytest.raises(ServeError, match="cannot be unpickled here"):
                await stream.__anext__()
        else:
            stream = await client.call("count", (10**9,), {})
            await stream.__anext__()
            if how == "closed early":
                await stream.aclose()
            else:
                await client.close()
        await asyncio.wait_for(producer.closed.wait(), 5)  # on_close ran: the replica's slot is free
        assert producer.made < 10**6
        await client.close()
        await server.close()
    asyncio.run(go())


def test_the_unpicklable_marker_is_what_the_test_thinks() -> None:
    with pytest.raises(RuntimeError):
        pickle.loads(pickle.dumps(Unpicklable()))
