"""``@serve.batch``: callers pass one item each, the method sees a list and returns a list.

>>> from airflowless import serve
>>> class Model:
...     @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
...     async def __call__(self, bodies: list) -> list:
...         return [b["x"] * 2 for b in bodies]
>>> import asyncio
>>> async def demo():
...     m = Model()
...     return await asyncio.gather(*(m({"x": i}) for i in range(3)))
>>> asyncio.run(demo())
[0, 2, 4]

A batch is cut when it holds ``max_batch_size`` items or ``batch_wait_timeout_s``
after its first item; calls that arrive while a batch runs form the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConfigError, UsageError

__all__ = ["batch"]


class _Batcher:
    def __init__(self, fn: Callable[..., Awaitable[list[Any]]], max_size: int, wait: float) -> None:
        self.fn, self.max_size, self.wait = fn, max_size, wait
        self.queue: list[tuple[Any, asyncio.Future[Any]]] = []
        self.full = asyncio.Event()
        self.task: asyncio.Future[None] | None = None

    async def submit(self, owner: tuple[Any, ...], item: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.queue.append((item, future))
        if len(self.queue) >= self.max_size:
            self.full.set()
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._drain(owner))
        return await future

    async def _drain(self, owner: tuple[Any, ...]) -> None:
        while self.queue:
            if len(self.queue) < self.max_size:
                self.full.clear()
                if self.wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.full.wait(), self.wait)
                else:
                    await asyncio.sleep(0)
            taken, self.queue = self.queue[: self.max_size], self.queue[self.max_size:]
            try:
                results = _one_per_input(await self.fn(*owner, [item for item, _ in taken]), len(taken))
                for (_, future), result in zip(taken, results, strict=True):
                    if not future.done():
                        future.set_result(result)
            except Exception as exc:
                for _, future in taken:
                    if not future.done():
                        future.set_exception(exc)


def _one_per_input(results: Any, inputs: int) -> list[Any]:
    """A batch's results as a list: a list, tuple, numpy array or pandas Series of the batch's length (as Ray)."""
    if isinstance(results, str | bytes | dict) or not hasattr(results, "__len__") or not hasattr(results, "__iter__") \
            or hasattr(results, "columns"):  # a DataFrame iterates over its column names
        raise UsageError(f"a @serve.batch function must return a list (or array) with one result per input: "
                        f"{inputs} inputs, got {type(results).__name__}")
    if len(results) != inputs:
        raise UsageError(f"a @serve.batch function must return one result per input: {inputs} inputs, "
                        f"got {len(results)} results")
    return list(results)


def batch(_fn: Any = None, /, *, max_batch_size: int = 10, batch_wait_timeout_s: float = 0.01) -> Any:
    """Batch calls of an async function or method taking a list (see the module docstring)."""
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ConfigError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
    if isinstance(batch_wait_timeout_s, bool) or not isinstance(batch_wait_timeout_s, int | float) \
            or not batch_wait_timeout_s >= 0:
        raise ConfigError(f"batch_wait_timeout_s must be a number >= 0, got {batch_wait_timeout_s!r}")

    def wrap(fn: Any) -> Any:
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError(f"@serve.batch goes on an async def function, got {getattr(fn, '__name__', fn)!r}; "
                              "make it `async def`")
        is_method = len(inspect.signature(fn).parameters) >= 2
        attr = f"_serve_batcher_{fn.__name__}"
        shared: dict[str, _Batcher] = {}

        if is_method:
            @functools.wraps(fn)
            async def method(self: Any, item: Any) -> Any:
                batcher = self.__dict__.get(attr)
                if batcher is None:
                    batcher = self.__dict__[attr] = _Batcher(fn, max_batch_size, batch_wait_timeout_s)
                return await batcher.submit((self,), item)
            return method

        @functools.wraps(fn)
        async def function(item: Any) -> Any:
            if "b" not in shared:
                shared["b"] = _Batcher(fn, max_batch_size, batch_wait_timeout_s)
            return await shared["b"].submit((), item)
        return function

    return wrap(_fn) if _fn is not None else wrap
