"""LightGBM's socket network across ranks: every rank listens on a port; all learn the machine list."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .base import Backend, free_port, worker_host
from .chatter import route_lightgbm_logs

__all__ = ["LightGBMBackend"]


@dataclass
class LightGBMBackend(Backend):
    timeout_s: float = 60.0

    @contextlib.contextmanager
    def rank_context(self, spec: Any, rendezvous: Any) -> Iterator[dict[str, Any]]:
        route_lightgbm_logs()
        host = worker_host()
        port = free_port(host)
        machines = rendezvous.all_gather(spec.rank, spec.world_size, f"{host}:{port}")
        yield {
            "machines": ",".join(machines),
            "local_listen_port": port,
            "num_machines": spec.world_size,
            "time_out": max(1, int(self.timeout_s // 60) or 1),
        }
