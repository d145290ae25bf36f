"""A rank's process keeps the memory it frees for the next step, while the rank trains.

Dask starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``) so that they hand freed memory back
at once. Setting it also freezes glibc's mmap threshold at 128 KiB: every
buffer above that is a fresh mapping whose pages the kernel zeroes again.
Training allocates the same buffers every step: a torch MLP's activations
(256 KiB at batch 1024 took twice the CPU), XGBoost's gradients and
predictions each round (megabytes per rank: W6's tune took 8-10% longer). So
while any rank runs in a process, glibc keeps freed memory as its own adaptive
threshold would; when the last one ends, the worker's settings are back and
the memory is trimmed. A process started without that setting is left alone
(glibc adapts by itself there).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

__all__ = ["freed_memory_kept"]

# glibc's mallopt parameters and defaults (malloc/malloc.c)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEPT_MMAP_THRESHOLD = 32 << 20  # the most glibc's own moving threshold grows to on 64-bit
_DEFAULT_MMAP_THRESHOLD = 128 << 10

_lock = threading.Lock()
_holders: dict[int, int] = {}  # thread -> how deep it is inside the block (two groups' ranks may share a worker)


def _alive(holders: dict[int, int]) -> dict[int, int]:
    """``holders`` without threads that have ended: a rank's thread that died inside the block (an exception
    raised into it at the wrong moment) must not keep the setting for the life of the worker."""
    threads = {thread.ident for thread in threading.enumerate()}
    return {ident: depth for ident, depth in holders.items() if ident in threads}


@contextlib.contextmanager
def freed_memory_kept() -> Iterator[None]:
    """glibc keeps freed memory for reuse in the block, and hands it back to the system after."""
    import ctypes

    global _holders
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")  # glibc's own variable, read as glibc read it
    libc = ctypes.CDLL(None)  # this process's C library
    if trim is None or not hasattr(libc, "mallopt"):
        yield
        return
    me = threading.get_ident()
    with _lock:
        _holders = _alive(_holders)
        if not _holders:
            libc.mallopt(_M_MMAP_THRESHOLD, _KEPT_MMAP_THRESHOLD)
            libc.mallopt(_M_TRIM_THRESHOLD, 2 * _KEPT_MMAP_THRESHOLD)
        _holders[me] = _holders.get(me, 0) + 1
    try:
        yield
    finally:
        with _lock:
            if _holders.get(me, 0) > 1:
                _holders[me] -= 1
            else:
                _holders.pop(me, None)
            _holders = _alive(_holders)
            if not _holders:
                libc.mallopt(_M_TRIM_THRESHOLD, int(trim))
                libc.mallopt(_M_MMAP_THRESHOLD,
                             int(os.environ.get("MALLOC_MMAP_THRESHOLD_", _DEFAULT_MMAP_THRESHOLD)))
                libc.malloc_trim(0)
