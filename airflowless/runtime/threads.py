"""Raising an exception inside another thread of this process.

Python cannot kill a thread, so code that must stop one raises an exception
*inside* it (CPython's ``PyThreadState_SetAsyncExc``): pure-Python code stops
at its next bytecode; code blocked in C stops when it returns to Python, or
never, which is why every caller has a harder fallback (a worker restarted).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

__all__ = ["MarkedThreads", "set_async_exc"]

K = TypeVar("K")


def set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``thread_id`` at its next bytecode (None: drop one not delivered yet)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


class MarkedThreads(Generic[K]):
    """The threads of this process marked as running some work, by key, which another thread may interrupt."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[K, int] = {}

    @contextmanager
    def mark(self, key: K) -> Iterator[None]:
        """Mark this thread as running ``key`` while the block runs (it may be interrupted)."""
        with self._lock:
            self._threads[key] = threading.get_ident()
        try:
            yield
        finally:
            with self._lock:
                self._threads.pop(key, None)
                set_async_exc(threading.get_ident(), None)  # one raised too late to be delivered goes too

    def keys(self, where: Callable[[K], bool] = lambda key: True) -> list[K]:
        """The keys running now (those ``where`` accepts)."""
        with self._lock:
            return [key for key in self._threads if where(key)]

    def key_of(self, ident: int) -> K | None:
        """The key thread ``ident`` runs now, or None."""
        with self._lock:
            return next((key for key, thread in self._threads.items() if thread == ident), None)

    def has_thread(self, ident: int) -> bool:
        with self._lock:
            return ident in self._threads.values()

    def interrupt(self, where: Callable[[K], bool], exc: type[BaseException]) -> list[K]:
        """Raise ``exc`` in the threads running keys ``where`` accepts; those keys."""
        with self._lock:
            found = [(key, thread) for key, thread in self._threads.items() if where(key)]
            for _, thread in found:
                set_async_exc(thread, exc)
        return [key for key, _ in found]
