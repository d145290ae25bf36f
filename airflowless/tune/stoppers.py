"""Stoppers: end trials (or the experiment) on a condition. ``stopper(trial_id, result) -> bool``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError

__all__ = ["MaximumIterationStopper", "TimeoutStopper", "TrialPlateauStopper", "FunctionStopper", "as_stoppers"]


@dataclass
class MaximumIterationStopper:
    max_iter: int

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return int(result.get("training_iteration", 0)) >= self.max_iter


@dataclass
class TimeoutStopper:
    """Stop every trial once the experiment has run ``timeout_s`` seconds."""

    timeout_s: float
    _start: float = field(default_factory=time.monotonic)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return time.monotonic() - self._start > self.timeout_s


@dataclass
class TrialPlateauStopper:
    """Stop a trial whose ``metric`` moved less than ``std`` over the last ``num_results`` results."""

    metric: str
    std: float = 0.01
    num_results: int = 4
    grace_period: int = 4
    _history: dict[str, list[float]] = field(default_factory=dict)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        import numpy as np

        if self.metric not in result:
            return False
        values = self._history.setdefault(trial_id, [])
        values.append(float(result[self.metric]))
        if len(values) < max(self.grace_period, self.num_results):
            return False
        return float(np.std(values[-self.num_results:])) < self.std


@dataclass
class FunctionStopper:
    fn: Callable[[str, dict[str, Any]], bool]

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self.fn(trial_id, result))


def as_stoppers(stop: Any) -> list[Any]:
    """RunConfig(stop=...) as stoppers: a dict of thresholds, a callable, a stopper, or a list of those."""
    if stop is None:
        return []
    if isinstance(stop, dict):
        limits = dict(stop)
        return [FunctionStopper(lambda _tid, result: any(
            k in result and result[k] >= v for k, v in limits.items()))]
    if isinstance(stop, (list, tuple)):
        return [s for item in stop for s in as_stoppers(item)]
    if callable(stop):
        return [stop if not isinstance(stop, type) else stop()]
    raise UsageError(f"stop must be a dict, a callable or a stopper, got {stop!r}")
