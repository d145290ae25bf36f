"""Median stopping: stop a trial whose best result is worse than the median of the others' running means."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import Decision, TrialScheduler, TrialView

__all__ = ["MedianStoppingRule"]


@dataclass
class MedianStoppingRule(TrialScheduler):
    metric: str | None = None
    mode: str | None = None
    time_attr: str = "training_iteration"
    grace_period: float = 1
    min_samples_required: int = 3
    _scores: dict[str, list[tuple[float, float]]] = field(default_factory=dict, repr=False)

    def on_trial_result(self, trial: TrialView, result: dict[str, Any]) -> Decision:
        score = self._score(result)
        if score is None:
            return Decision.CONTINUE
        t = float(result.get(self.time_attr, trial.iteration))
        self._scores.setdefault(trial.trial_id, []).append((t, score))
        if t < self.grace_period:
            return Decision.CONTINUE
        others = [np.mean([s for ti, s in history if ti <= t]) for tid, history in self._scores.items()
                  if tid != trial.trial_id and any(ti <= t for ti, _ in history)]
        if len(others) < self.min_samples_required:
            return Decision.CONTINUE
        best = max(s for _, s in self._scores[trial.trial_id])
        return Decision.STOP if best < float(np.median(others)) else Decision.CONTINUE
