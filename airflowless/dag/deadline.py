"""A deadline for code running in the current thread.

Python cannot kill a thread, so the deadline raises an exception *inside* the
thread (CPython's ``PyThreadState_SetAsyncExc``). Pure-Python code stops at
its next bytecode; code blocked in C stops when it returns to Python. The
exception derives from ``BaseException`` so a stage's ``except Exception``
does not swallow it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..runtime.threads import set_async_exc

__all__ = ["DeadlineExceeded", "deadline"]


class DeadlineExceeded(BaseException):
    """Raised inside a thread whose deadline passed."""


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`DeadlineExceeded` in this thread if the block runs past ``seconds``."""
    if seconds is None:
        yield
        return
    thread_id = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                set_async_exc(thread_id, DeadlineExceeded)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["fired"]:
                set_async_exc(thread_id, None)  # drop it if it was not delivered yet
