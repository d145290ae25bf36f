"""Inputs run once for all the parts of a split.

``train, test = ds.train_test_split(0.2)`` gives two plans over one
``Shared`` node. The first part that runs computes the shared input and its
blocks are kept here, under the node's token, for every later run of any
part in this process, so that the parts cut the *same* rows even when the
input draws random numbers. The blocks are released when the last plan
holding the node is garbage-collected (:func:`register` ties the entry to it).

A token that was not registered in this process (a part unpickled in
another process) is not kept: each run there computes its input again.

>>> blocks = run_shared("unregistered", None, lambda: ["block"])
>>> blocks
['block']
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["register", "run_shared"]


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    blocks: list[Any] | None = None
    client: Any = None


_ENTRIES: dict[str, _Entry] = {}


def register(node: Any, token: str) -> None:
    """Keep the blocks of ``token`` while ``node`` (the logical node that names it) is alive."""
    _ENTRIES.setdefault(token, _Entry())
    weakref.finalize(node, _ENTRIES.pop, token, None)


def _usable(entry: _Entry, ex: Any) -> bool:
    if entry.blocks is None or entry.client is not getattr(ex, "client", None):
        return False
    return all(f.status not in ("cancelled", "error") for f in entry.blocks)  # lost ones Dask recomputes


def run_shared(token: str, ex: Any, compute: Callable[[], list[Any]]) -> list[Any]:
    """The block futures of the shared input ``token``: kept ones, or ``compute()`` (kept if registered).

    Kept blocks are taken out of ``ex``'s ownership, so that a consumer that
    stops early does not cancel blocks the other parts still need.
    """
    entry = _ENTRIES.get(token)
    if entry is None:
        return compute()
    with entry.lock:
        if not _usable(entry, ex):
            from distributed import wait

            blocks = compute()
            wait(blocks)
            if any(f.status != "finished" for f in blocks):
                return blocks  # an error: the consumer raises it; the next run tries again
            for future in blocks:
                ex.owners.pop(str(future.key), None)
            entry.blocks, entry.client = blocks, ex.client
        return list(entry.blocks or ())
