"""What this process's malloc holds: how tests measure the memory a library allocates in C or C++.

>>> from tests.support.malloc import held_bytes
>>> held_bytes() > 0                                              # doctest: +SKIP
True
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from typing import TypeVar

import pytest

__all__ = ["held_bytes", "mean_held"]

T = TypeVar("T")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]


def held_bytes() -> int:
    """The bytes malloc has handed out and not had back (glibc's mallinfo2, over all arenas: what is
    allocated, whether or not freed memory went back to the system). Skips the test without glibc >= 2.33."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("needs glibc >= 2.33 (mallinfo2) to measure what malloc holds")
    libc.mallinfo2.restype = _MallInfo2
    gc.collect()
    found = libc.mallinfo2()
    return int(found.uordblks + found.hblkhd)


def mean_held(make: Callable[[], T], times: int = 3) -> tuple[float, list[T]]:
    """(the mean of what ``make()``'s results hold in malloc, the results): one made first and kept, so
    that what making allocates once (pools, buffers malloc keeps) is not counted, then ``times`` more."""
    kept = [make()]
    before = held_bytes()
    kept += [make() for _ in range(times)]
    return (held_bytes() - before) / times, kept
