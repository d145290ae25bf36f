"""DataContext: the knobs of the streaming executor, in one object.

>>> from airflowless.data import DataContext
>>> ctx = DataContext.get_current()
>>> before = ctx.max_tasks_in_flight_per_op
>>> ctx.max_tasks_in_flight_per_op = 8  # what this process's datasets run with from now on
>>> ctx.max_tasks_in_flight_per_op = before
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["DataContext"]


@dataclass(kw_only=True)
class DataContext:
    """Executor settings for the current process.

    ``max_tasks_in_flight_per_op``: tasks an operator may have submitted and not yet
    consumed (None: 2 per worker thread). ``memory_budget_bytes``: block bytes the
    executor may hold at once (None: ``memory_budget_fraction`` of the cluster's
    memory). ``stall_timeout_s``: seconds without any progress before a
    :class:`~airflowless.data.execution.executor.StallError` names the operator
    that is blocked. ``progress_bars``: show tqdm bars (None: only on a terminal
    or in a notebook). ``optimizer_enabled``: False runs plans as written,
    without the optimizer's rules (to compare answers with and without them).
    ``shared_memory_blocks``: blocks a consumer reads from a worker on its own
    host come through ``/dev/shm`` without copies (:mod:`.execution.handoff`);
    False sends them through Dask's sockets, as across hosts.
    ``shared_memory_min_bytes``: smaller blocks come through Dask even so (a
    file costs more than their copy).
    """

    max_tasks_in_flight_per_op: int | None = None
    memory_budget_bytes: int | None = None
    memory_budget_fraction: float = 0.25
    stall_timeout_s: float = 300.0
    progress_bars: bool | None = None
    target_max_block_rows: int = 1_000_000
    optimizer_enabled: bool = True
    shared_memory_blocks: bool = True
    shared_memory_min_bytes: int = 1 << 20

    _current: ClassVar[DataContext | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def get_current(cls) -> DataContext:
        with cls._lock:
            if cls._current is None:
                cls._current = DataContext()
            return cls._current
