"""When an HTTP request stops waiting for its deployment: its deadline passed, or its client left.

Either way the proxy cancels the request's task, and the cancellation goes on
to the replica (:mod:`.wire`'s cancel frame). ``asyncio.timeout`` would do the
deadline with one timer per request, about 10 µs of the event loop's time each
(a handle pushed on the loop's heap, then cancelled): a measurable share of a
request's CPU under W5. Here one sweep, a few times a second, ends the
requests past their deadline: a deadline is kept within ``sweep_s`` (at most
1 s, a quarter of the timeout), and a request pays a dict entry.

>>> ends = RequestEnds(60.0)
>>> ends.sweep_s
1.0
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

__all__ = ["RequestEnds", "Watched"]


class Watched:
    """One request in flight: its task, when its deadline passes, and why it was ended (None: not ended)."""

    __slots__ = ("task", "expires", "why")

    def __init__(self, task: asyncio.Task[Any], expires: float) -> None:
        self.task, self.expires = task, expires
        self.why: str | None = None

    def end(self, why: str = "left") -> None:
        """End the request now (its client left): its task is cancelled, once."""
        if self.why is None:
            self.why = why
            self.task.cancel()


class RequestEnds:
    """The requests of one proxy in flight, and the one sweep that ends those past their deadline."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self.sweep_s = min(1.0, timeout_s / 4) if timeout_s is not None else math.inf
        self._inflight: dict[int, Watched] = {}
        self._sweeping: asyncio.TimerHandle | None = None

    def watch(self) -> Watched:
        """Register the running task as a request; call :meth:`forget` with what this returns when it ends."""
        task = asyncio.current_task()
        assert task is not None  # called from the app's request coroutine
        expires = time.monotonic() + self.timeout_s if self.timeout_s is not None else math.inf
        watched = Watched(task, expires)
        self._inflight[id(watched)] = watched
        if self._sweeping is None and self.timeout_s is not None:
            self._sweeping = asyncio.get_running_loop().call_later(self.sweep_s, self._sweep)
        return watched

    def forget(self, watched: Watched) -> None:
        self._inflight.pop(id(watched), None)

    def _sweep(self) -> None:
        now = time.monotonic()
        for watched in [w for w in self._inflight.values() if w.expires <= now]:
            watched.end("timeout")
        self._sweeping = (asyncio.get_running_loop().call_later(self.sweep_s, self._sweep)
                          if self._inflight else None)
