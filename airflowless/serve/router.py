"""Pick a replica for each request: power of two choices on ongoing requests, a bounded queue.

A router lives in one process and event loop (the HTTP proxy's, or a
replica's worker loop for handles used inside deployments). It counts the
requests it has in flight on each replica; a replica at
``max_ongoing_requests`` is not chosen; when all are, the request waits in a
queue of ``max_queued_requests`` and beyond that fails at once with
:class:`BackPressureError` (HTTP 503). A request whose replica is gone or
draining before it started is sent to another replica. While the controller
says the deployment has no replica and why (it waits for capacity), requests
fail at once with :class:`UnavailableError` (HTTP 503) instead of queueing.

>>> import asyncio
>>> router = Router("app/Echo", max_ongoing=2, max_queued=0)
>>> asyncio.run(router.call("__call__", (1,), {}, timeout=0.01))  # no replicas yet
Traceback (most recent call last):
...
airflowless.serve.errors.BackPressureError: ...
"""

from __future__ import annotations

import asyncio
import collections
import functools
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import BackPressureError, ReplicaDiedError, ServeError, UnavailableError
from .multiplex import ModelHomes
from .replica_table import ReplicaInfo
from .wire import Busy, Rejected, RemoteStream, WireClient

__all__ = ["Router"]

_MAX_ATTEMPTS = 4


@dataclass
class _Slot:
    info: ReplicaInfo
    ongoing: int = 0
    dead: bool = False
    removed: bool = False
    client: WireClient | None = None
    connecting: asyncio.Future[WireClient] | None = field(default=None, repr=False)

    async def connection(self, label: str, ssl_context: ssl.SSLContext | None) -> WireClient:
        if self.client is not None and not self.client.closed:
            return self.client
        if self.connecting is None or self.connecting.done():
            self.connecting = asyncio.ensure_future(WireClient.connect(
                self.info.host, self.info.port, self.info.token, label=label, ssl_context=ssl_context))
        try:
            self.client = await asyncio.shield(self.connecting)
        except (Rejected, OSError) as exc:  # gone, or another process answers at its address
            self.dead = True
            raise Rejected(str(exc)) from exc
        return self.client


class Router:
    """Routes calls of one deployment to its replicas (see the module docstring)."""

    def __init__(self, label: str, *, max_ongoing: int, max_queued: int,
                 on_failure: Callable[[str], None] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.label = label
        self.ssl_context = ssl_context  # the cluster's TLS, when it has it (see .wire)
        self.max_ongoing = max_ongoing
        self.max_queued = max_queued
        self.on_failure = on_failure
        self._slots: dict[str, _Slot] = {}
        self._homes = ModelHomes()
        self._loaded: dict[str, frozenset[str]] = {}  # replica id -> the models it reported holding
        self.unavailable = ""
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.served = 0  # requests answered, and the latest latencies (s): the control plane's serve feed
        self.latencies: collections.deque[float] = collections.deque(maxlen=4096)

    # -- replica set ---------------------------------------------------------------
    def update(self, replicas: list[ReplicaInfo], *, max_ongoing: int | None = None,
               max_queued: int | None = None, unavailable: str = "",
               models: dict[str, tuple[str, ...]] | None = None) -> None:
        """Route to exactly these replicas from now on; requests already running finish.

        ``unavailable``: why there are none for now (the deployment waits for
        capacity); requests then fail at once with that reason. ``models``: the
        multiplexed model ids each replica holds, by replica id (:mod:`.multiplex`).
        """
        self.unavailable = unavailable
        if models is not None:
            self._loaded = {replica: frozenset(ids) for replica, ids in models.items()}
        self.max_ongoing = max_ongoing or self.max_ongoing
        self.max_queued = self.max_queued if max_queued is None else max_queued
        wanted = {r.replica_id: r for r in replicas}
        for rid, slot in list(self._slots.items()):
            if rid not in wanted or wanted[rid] != slot.info:
                slot.removed = True
                del self._slots[rid]
                self._close_when_idle(slot)
        for rid, info in wanted.items():
            self._slots.setdefault(rid, _Slot(info))
        self._wake(all_waiters=True)

    def _close_when_idle(self, slot: _Slot) -> None:
        if slot.ongoing == 0 and slot.client is not None:
            asyncio.ensure_future(slot.client.close())

    @property
    def ongoing(self) -> int:
        return sum(s.ongoing for s in self._slots.values())

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @property
    def replica_ids(self) -> list[str]:
        return list(self._slots)

    # -- one request -----------------------------------------------------------------
    async def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                   timeout: float = 30.0, model_id: str = "") -> Any:
        """The method's answer; a :class:`.wire.RemoteStream` holds its replica's slot until it ends.

        ``model_id``: the multiplexed model the call is for; it goes to that model's home replica while
        it has room (:mod:`.multiplex`).
        """
        started = time.monotonic()
        deadline = started + timeout
        last: Exception | None = None
        busy: list[str] = []  # replicas that refused this request for now
        for _ in range(_MAX_ATTEMPTS):
            slot = await self._acquire(deadline, busy, model_id)
            streaming = False
            try:
                client = await slot.connection(f"replica {slot.info.replica_id} of {self.label}",
                                               self.ssl_context)
                answer = await client.call(method, args, kwargs, model_id)
                self.served += 1
                self.latencies.append(time.monotonic() - started)
                if isinstance(answer, RemoteStream):  # the replica is busy with it until it ends
                    answer.on_close = functools.partial(self._release, slot)
                    streaming = True
                return answer
            except Busy as exc:  # not started there for now: try another replica, keep this one
                last = exc
                busy.append(slot.info.replica_id)
            except Rejected as exc:  # not started there: try another replica
                last = exc
                self._failed(slot)
            except ReplicaDiedError:
                self._failed(slot)
                raise
            finally:
                if not streaming:
                    self._release(slot)
        raise ServeError(f"{self.label}: no replica accepted the request after {_MAX_ATTEMPTS} tries ({last})")

    def _failed(self, slot: _Slot) -> None:
        if not slot.dead:
            slot.dead = True
            if self.on_failure is not None:
                self.on_failure(slot.info.replica_id)

    def _choose(self, avoid: list[str] | None = None, model_id: str = "") -> _Slot | None:
        free = [s for s in self._slots.values() if not s.dead and s.ongoing < self.max_ongoing
                and not (avoid and s.info.replica_id in avoid)]
        if model_id:  # the model's home while it has room, else a replica that reported it loaded
            home = self._slots.get(self._homes.get(model_id) or "")
            if home is not None and any(home is s for s in free):
                return home
            holders = [s for s in free if model_id in self._loaded.get(s.info.replica_id, ())]
            if holders:
                return min(holders, key=lambda s: (s.ongoing, random.random()))
        if len(free) > 2:
            free = random.sample(free, 2)
        return min(free, key=lambda s: (s.ongoing, random.random())) if free else None

    async def _acquire(self, deadline: float, busy: list[str], model_id: str = "") -> _Slot:
        while True:
            slot = self._choose(busy, model_id)
            if slot is not None:
                slot.ongoing += 1
                if model_id:  # its home from now on: the calls right behind it go there too
                    self._homes.set(model_id, slot.info.replica_id)
                return slot
            if busy and self._choose() is not None:  # only replicas that just refused it are free
                raise ServeError(f"{self.label}: every free replica is still running a call its caller left; "
                                 "retry in a moment (stuck replicas are replaced)")
            if self.unavailable and all(s.dead for s in self._slots.values()):
                raise UnavailableError(self.label, self.unavailable)
            if len(self._waiters) >= self.max_queued:
                raise BackPressureError(self.label, self.max_ongoing, self.max_queued)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                live = sum(not s.dead for s in self._slots.values())
                raise ServeError(f"{self.label}: no replica could take the request in time "
                                 f"({live} live replicas); retry, or add replicas") from None
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _release(self, slot: _Slot) -> None:
        slot.ongoing -= 1
        if slot.removed:
            self._close_when_idle(slot)
        self._wake()

    def _wake(self, *, all_waiters: bool = False) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                if not all_waiters:
                    return
