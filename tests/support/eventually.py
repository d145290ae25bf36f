"""Wait for a condition in tests instead of for a length of time.

>>> from tests.support.eventually import eventually
>>> eventually(lambda: 1 + 1 == 2)
True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["eventually"]

T = TypeVar("T")


def eventually(condition: Callable[[], T], *, timeout: float = 60.0, interval: float = 0.1,
               message: str | Callable[[], str] = "") -> T:
    """Call ``condition`` until it returns something true, and return that; fail after ``timeout`` seconds.

    The timeout is generous on purpose (a loaded machine is slow, not wrong): a
    test states what must become true, never how fast.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = message() if callable(message) else message
            raise AssertionError(f"not true within {timeout:g} s: {detail or condition}; last value {value!r}")
        time.sleep(interval)
