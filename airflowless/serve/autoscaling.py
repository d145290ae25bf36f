"""The autoscaling decision: a pure function of the config, the replica count and the load.

>>> cfg = AutoscalingConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=2,
...                         upscale_delay_s=1, downscale_delay_s=5)
>>> d = decide(cfg, current=1, ongoing=7.0, now=0.0, pending=None)
>>> d.desired, d.pending                      # wants 4, waits for the upscale delay
(1, Pending(desired=4, since=0.0))
>>> decide(cfg, current=1, ongoing=7.0, now=1.0, pending=d.pending).desired
4
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import AutoscalingConfig

__all__ = ["Decision", "Pending", "decide", "wanted_replicas"]


@dataclass(frozen=True)
class Pending:
    """A change wished for since ``since``, applied once it has lasted the delay."""

    desired: int
    since: float


@dataclass(frozen=True)
class Decision:
    desired: int
    pending: Pending | None


def wanted_replicas(config: AutoscalingConfig, ongoing: float) -> int:
    """``ceil(ongoing / target)`` within ``[min_replicas, max_replicas]``."""
    raw = math.ceil(max(ongoing, 0.0) / config.target_ongoing_requests - 1e-9)
    return min(max(raw, config.min_replicas), config.max_replicas)


def decide(config: AutoscalingConfig, *, current: int, ongoing: float, now: float,
           pending: Pending | None) -> Decision:
    """How many replicas to run now, given ``ongoing`` requests (running + queued) over all replicas.

    A wish to go up (down) must hold for ``upscale_delay_s`` (``downscale_delay_s``);
    while it holds, the largest (smallest) wished count since then is kept.
    """
    wanted = wanted_replicas(config, ongoing)
    if wanted == current:
        return Decision(current, None)
    up = wanted > current
    if pending is None or (pending.desired > current) != up:
        pending = Pending(wanted, now)
    else:
        pending = Pending(max(pending.desired, wanted) if up else min(pending.desired, wanted), pending.since)
    delay = config.upscale_delay_s if up else config.downscale_delay_s
    if now - pending.since >= delay:
        return Decision(pending.desired if up else wanted, None)
    return Decision(current, pending)
