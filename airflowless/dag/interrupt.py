"""Stopping a cancelled run's stages on the workers, not only forgetting them.

Dask's ``cancel`` forgets a running task but lets its code run on: a stage
cancelled in a 300 s sleep held its worker's slot for 300 s. So the driver of
a cancelled run, after cancelling its futures, stops the stages still running:

1. :func:`interrupt_run`, run on every worker, raises :class:`StageCancelled`
   inside each thread running a stage of the run (as a stage's deadline does):
   Python code stops at its next bytecode;
2. a stage still running after :data:`GRACE_S` is blocked in C code (a sleep,
   a socket read, a native library), which no exception reaches: its worker
   process is restarted (``Client.restart_workers``), which ends it for sure.

:func:`stop_stages` does both and says which, per stage, so the record and the
console can tell the user what happened to their code.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from typing import Any

from ..runtime.threads import MarkedThreads

__all__ = ["GRACE_S", "StageCancelled", "in_stage", "interrupt_run", "running_stages", "stage_thread", "stop_stages"]

GRACE_S = 3.0
"""How long interrupted stages get to stop before their workers are restarted."""

_stages: MarkedThreads[tuple[int, str]] = MarkedThreads()  # (run id, node): the threads running stage bodies here


class StageCancelled(BaseException):
    """Raised inside a stage's thread when its run was cancelled (not an ``Exception``: not swallowed)."""


def stage_thread(run_id: int, node: str) -> AbstractContextManager[None]:
    """Mark this thread as running ``node`` of run ``run_id`` while the block runs (it may be interrupted)."""
    return _stages.mark((run_id, node))


def current_stage() -> tuple[int, str] | None:
    """(run id, node) of the stage this thread runs now, or None outside a stage."""
    return _stages.key_of(threading.get_ident())


def in_stage() -> bool:
    """Whether this thread runs a pipeline stage's body now."""
    return _stages.has_thread(threading.get_ident())


def running_stages(run_id: int) -> list[str]:
    """The nodes of run ``run_id`` whose bodies run in this process now."""
    return sorted(node for run, node in _stages.keys(lambda key: key[0] == run_id))


def interrupt_run(run_id: int) -> list[str]:
    """Raise :class:`StageCancelled` in this process's threads running stages of ``run_id``; their nodes."""
    return sorted(node for _, node in _stages.interrupt(lambda key: key[0] == run_id, StageCancelled))


def stop_stages(client: Any, run_id: int, *, grace_s: float = GRACE_S) -> dict[str, str]:
    """Stop what still runs of run ``run_id`` on ``client``'s workers; node -> what was done to it."""
    told = {address: nodes for address, nodes in client.run(interrupt_run, run_id).items() if nodes}
    if not told:
        return {}
    deadline = time.monotonic() + grace_s
    still = told
    while still and time.monotonic() < deadline:
        time.sleep(0.1)
        still = {address: nodes for address, nodes in client.run(running_stages, run_id, workers=list(still)).items()
                 if nodes}
    done = {node: "interrupted" for nodes in told.values() for node in nodes}
    if still:
        client.restart_workers(list(still), timeout=60)
        done.update({node: f"stopped by restarting its worker {address} (it was blocked outside Python code)"
                     for address, nodes in still.items() for node in nodes})
    return done
