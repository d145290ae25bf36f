"""Ending the ranks a driver stopped waiting for.

A rank asked to stop ends at its next report; one that never reports again (a
loop blocked in a collective whose peer failed, a long data load, a sleep)
would keep its thread, its worker's declared resources and the process-wide
settings of a running rank (:mod:`.rank_memory`) for as long as it likes:
Dask's ``cancel`` forgets the task, not the thread. So when the driver shuts
a group down and ranks still run after the grace:

1. :func:`interrupt_ranks`, run on their workers, raises
   :class:`~airflowless.train.context.StopRequested` inside each thread of the
   group (Python code stops at its next bytecode, and leaves its backend's
   context as after a stop);
2. a rank still running after a second grace is blocked in C code, which no
   exception reaches: its worker process is restarted, which ends it for sure
   (Ray kills the actor of a rank it gives up on).
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from typing import Any

from ..runtime.threads import MarkedThreads
from .context import StopRequested

__all__ = ["end_ranks", "interrupt_ranks", "rank_thread", "running_ranks"]

log = logging.getLogger(__name__)

_ranks: MarkedThreads[tuple[str, int]] = MarkedThreads()  # (group, rank): the threads running ranks here


def rank_thread(group: str, rank: int) -> AbstractContextManager[None]:
    """Mark this thread as running ``rank`` of ``group`` while the block runs (it may be interrupted)."""
    return _ranks.mark((group, rank))


def running_ranks(group: str | None = None) -> list[int]:
    """The ranks of ``group`` (of any group: None) running in this process now."""
    return sorted(rank for name, rank in _ranks.keys(lambda key: group is None or key[0] == group))


def interrupt_ranks(group: str) -> list[int]:
    """Raise :class:`StopRequested` in this process's threads running ranks of ``group``; those ranks."""
    return sorted(rank for _, rank in _ranks.interrupt(lambda key: key[0] == group, StopRequested))


def end_ranks(client: Any, group: str, workers: list[str], *, grace_s: float) -> dict[str, list[int]]:
    """End what still runs of ``group`` on ``workers``: interrupt it, then restart the workers where it
    still runs after ``grace_s``; the workers restarted and their ranks."""
    try:
        told = {w: ranks for w, ranks in client.run(interrupt_ranks, group, workers=workers).items() if ranks}
    except Exception:  # a worker went away meanwhile: its ranks went with it
        return {}
    deadline = time.monotonic() + grace_s
    still = told
    while still and time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            still = {w: ranks for w, ranks in client.run(running_ranks, group, workers=list(still)).items() if ranks}
        except Exception:
            return {}
    if still:
        log.warning("rank(s) %s of %s still run after being stopped (blocked outside Python code): "
                    "restarting their worker(s) %s", sorted(r for ranks in still.values() for r in ranks),
                    group, sorted(still))
        try:
            client.restart_workers(list(still), timeout=60)
        except Exception as exc:  # a worker without a nanny cannot be restarted: say so, the rank holds it
            log.warning("could not restart %s: %s", sorted(still), exc)
    return still
