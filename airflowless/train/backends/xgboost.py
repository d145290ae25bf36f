"""XGBoost's collective across ranks: rank 0 runs the tracker, every rank joins its communicator."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .base import Backend, worker_host
from .chatter import route_xgboost_logs

__all__ = ["XGBoostBackend"]


@dataclass
class XGBoostBackend(Backend):
    timeout_s: float = 60.0
    modules = ("xgboost", "xgboost.collective", "xgboost.tracker")

    @contextlib.contextmanager
    def rank_context(self, spec: Any, rendezvous: Any) -> Iterator[dict[str, Any]]:
        from xgboost import collective
        from xgboost.tracker import RabitTracker

        route_xgboost_logs()
        tracker = None
        if spec.rank == 0:
            tracker = RabitTracker(n_workers=spec.world_size, host_ip=worker_host(), port=0,
                                   timeout=int(self.timeout_s))
            tracker.start()
            rendezvous.publish("tracker", tracker.worker_args())
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
