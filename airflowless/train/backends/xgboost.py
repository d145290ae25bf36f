"""XGBoost's collective across ranks: rank 0 runs the tracker, every rank joins its communicator.

Rank 0 gives the tracker a port it picked, so the ranks' arguments are known
as soon as the tracker listens (it binds in its constructor): XGBoost's
``RabitTracker.worker_args()`` waits for the tracker's thread in steps of a
tenth of a second, which every fit (every Tune trial) would wait once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .base import Backend, listen_on, worker_host
from .chatter import route_xgboost_logs

__all__ = ["XGBoostBackend", "start_tracker"]

PORT_TRIES = 5  # ports tried for the tracker (another process may take a free port before the tracker binds it)


def start_tracker(world_size: int, host: str, timeout_s: int) -> tuple[Any, dict[str, Any]]:
    """A started ``RabitTracker`` for ``world_size`` ranks on ``host``, and the arguments ranks connect with."""
    from xgboost.core import XGBoostError

    for _ in range(PORT_TRIES - 1):
        with contextlib.suppress(XGBoostError):  # the port was taken meanwhile: another one
            return _tracker_on(world_size, host, timeout_s)
    return _tracker_on(world_size, host, timeout_s)


def _tracker_on(world_size: int, host: str, timeout_s: int) -> tuple[Any, dict[str, Any]]:
    from xgboost.tracker import RabitTracker

    with listen_on(host) as probe:  # a port the system says is free
        port = int(probe.getsockname()[1])
    tracker = RabitTracker(n_workers=world_size, host_ip=host, port=port, timeout=timeout_s)
    tracker.start()
    return tracker, {"dmlc_tracker_uri": host, "dmlc_tracker_port": port}


@dataclass
class XGBoostBackend(Backend):
    timeout_s: float = 60.0
    modules = ("xgboost", "xgboost.collective", "xgboost.tracker")

    @contextlib.contextmanager
    def rank_context(self, spec: Any, rendezvous: Any) -> Iterator[dict[str, Any]]:
        from xgboost import collective

        route_xgboost_logs()
        tracker = None
        if spec.rank == 0:
            tracker, args = start_tracker(spec.world_size, worker_host(), int(self.timeout_s))
            rendezvous.publish("tracker", args)
        args = dict(rendezvous.receive("tracker"))
        args["dmlc_task_id"] = f"[airflowless]:rank-{spec.rank}"
        args.setdefault("dmlc_timeout", int(self.timeout_s))
        ok = False
        try:
            with collective.CommunicatorContext(**args):
                yield args
            ok = True
        finally:
            if tracker is not None:
                # the other ranks say goodbye to the tracker when they finish: wait for them
                with contextlib.suppress(Exception):
                    if ok:
                        tracker.wait_for(int(self.timeout_s))
                with contextlib.suppress(Exception):
                    tracker.free()
