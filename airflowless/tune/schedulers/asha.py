"""ASHA: asynchronous successive halving (Li et al.), with HyperBand-style brackets.

Rungs sit at ``grace_period * reduction_factor**k`` (up to ``max_t``). When a
trial reaches a rung it is compared with the trials that reached it before:
unless its score is in the top ``1/reduction_factor`` of them, it stops. No
trial waits for others, so slots never sit idle.

>>> from airflowless.tune.schedulers.base import TrialView
>>> asha = ASHAScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=4)
>>> asha.on_trial_add(TrialView("a", {}, 0))
>>> asha.on_trial_result(TrialView("a", {}, 1), {"training_iteration": 1, "loss": 1.0}).name
'CONTINUE'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ConfigError
from .base import Decision, TrialScheduler, TrialView

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]


@dataclass
class _Bracket:
    rungs: list[tuple[float, dict[str, float]]]  # (milestone, scores recorded), highest first
    reduction_factor: float

    def decide(self, trial_id: str, t: float, score: float) -> Decision:
        for milestone, recorded in self.rungs:
            if t < milestone or trial_id in recorded:
                continue
            decision = Decision.CONTINUE
            if recorded:
                cutoff = float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.reduction_factor) * 100))
                if score < cutoff:
                    decision = Decision.STOP
            recorded[trial_id] = score
            return decision
        return Decision.CONTINUE


@dataclass
class ASHAScheduler(TrialScheduler):
    metric: str | None = None
    mode: str | None = None
    time_attr: str = "training_iteration"
    max_t: float = 100
    grace_period: float = 1
    reduction_factor: float = 4
    brackets: int = 1
    _brackets: list[_Bracket] = field(default_factory=list, repr=False)
    _assigned: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.grace_period <= 0 or self.max_t < self.grace_period:
            raise ConfigError(f"ASHA needs 0 < grace_period <= max_t, got {self.grace_period}, {self.max_t}")
        if self.reduction_factor <= 1:
            raise ConfigError(f"ASHA needs reduction_factor > 1, got {self.reduction_factor}")
        if self.brackets < 1:
            raise ConfigError(f"ASHA needs brackets >= 1, got {self.brackets}")
        levels = int(math.log(self.max_t / self.grace_period, self.reduction_factor)) + 1
        for s in range(self.brackets):
            milestones = [self.grace_period * self.reduction_factor ** (k + s) for k in range(levels - s)]
            self._brackets.append(_Bracket([(m, {}) for m in reversed(milestones) if m <= self.max_t],
                                           self.reduction_factor))

    def on_trial_add(self, trial: TrialView) -> None:
        # trials go round-robin into brackets, as Ray's AsyncHyperBand does in expectation;
        # a trial added again (a restored experiment) keeps its bracket
        self._assigned.setdefault(trial.trial_id, len(self._assigned) % len(self._brackets))

    def on_trial_result(self, trial: TrialView, result: dict[str, Any]) -> Decision:
        t = float(result.get(self.time_attr, trial.iteration))
        if t >= self.max_t:
            return Decision.STOP
        score = self._score(result)
        if score is None:
            return Decision.CONTINUE
        bracket = self._brackets[self._assigned.setdefault(trial.trial_id, 0)]
        return bracket.decide(trial.trial_id, t, score)


class AsyncHyperBandScheduler(ASHAScheduler):
    """ASHA with several brackets (HyperBand's aggressiveness levels, run asynchronously)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("brackets", 3)
        super().__init__(**kwargs)
