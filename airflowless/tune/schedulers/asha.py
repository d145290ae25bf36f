"""ASHA: asynchronous successive halving (Li et al.), with HyperBand-style brackets.

Rungs sit at ``grace_period * reduction_factor**k`` (up to ``max_t``). A trial
is judged once at each rung it reaches, against the trials recorded there
before it. Two rules, chosen with ``promotion``:

- **stopping** (``promotion=False``, Ray Tune's rule): unless the trial's score
  is in the top ``1/reduction_factor`` of the rung, it stops for good. No trial
  ever waits, but the first trials to reach a rung pass it unjudged, so early
  trials often run to ``max_t`` whatever their quality.
- **promotion** (``promotion=True``, the rule of the ASHA paper): a trial goes
  on only while it ranks within the top ``floor(n / reduction_factor)`` of the
  ``n`` trials of the rung; otherwise it pauses there. Paused trials are
  resumed (promoted) when later arrivals lift them into that top group, before
  any new trial starts; once no new trial can start and nothing runs, the top
  ``ceil(n / reduction_factor)`` may go on, so the best trial still reaches
  ``max_t``. A paused function trial waits in memory on its worker (its slot is
  freed); a paused Trainer trial restarts from its latest checkpoint.
  On the W4 learning curve this spends about half the iterations of the
  stopping rule for the same best loss (docs/tune.md has the figures).

>>> from airflowless.tune.schedulers.base import TrialView
>>> asha = ASHAScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=4)
>>> asha.on_trial_add(TrialView("a", {}, 0))
>>> asha.on_trial_result(TrialView("a", {}, 1), {"training_iteration": 1, "loss": 1.0}).name
'CONTINUE'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
    promoted: dict[float, set[str]] = field(default_factory=dict)  # milestone -> trials sent on from it

    def decide(self, trial_id: str, t: float, score: float, promotion: bool) -> Decision:
        for milestone, recorded in self.rungs:
            if t < milestone or trial_id in recorded:
                continue
            if promotion:
                recorded[trial_id] = score
                if trial_id in self._top(milestone, final=False):
                    self.promoted.setdefault(milestone, set()).add(trial_id)
                    return Decision.CONTINUE
                return Decision.PAUSE
            decision = Decision.CONTINUE
            if recorded:
                cutoff = float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.reduction_factor) * 100))
                if score < cutoff:
                    decision = Decision.STOP
            recorded[trial_id] = score
            return decision
        return Decision.CONTINUE

    def _top(self, milestone: float, final: bool) -> list[str]:
        recorded = dict(self.rungs)[milestone]
        share = len(recorded) / self.reduction_factor
        ranked = sorted(recorded, key=lambda tid: recorded[tid], reverse=True)
        return ranked[:math.ceil(share) if final else math.floor(share)]

    def promotable(self, paused: set[str], final: bool) -> tuple[float, str] | None:
        """The best paused trial of the highest rung where it ranks in the top share and was not sent on."""
        for milestone, _ in self.rungs:
            for trial_id in self._top(milestone, final):
                if trial_id in paused and trial_id not in self.promoted.get(milestone, set()):
                    return milestone, trial_id
        return None


@dataclass
class ASHAScheduler(TrialScheduler):
    metric: str | None = None
    mode: str | None = None
    time_attr: str = "training_iteration"
    max_t: float = 100
    grace_period: float = 1
    reduction_factor: float = 4
    brackets: int = 1
    promotion: bool = False
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
        return bracket.decide(trial.trial_id, t, score, self.promotion)

    def choose_trial_to_resume(self, paused: Sequence[TrialView], *, idle: bool) -> str | None:
        if not self.promotion or not paused:
            return None
        waiting = {view.trial_id for view in paused}
        best: tuple[float, str] | None = None
        for bracket in self._brackets:
            found = bracket.promotable(waiting, final=idle)
            if found is not None and (best is None or found[0] > best[0]):
                best = found
        if best is None:
            return None
        milestone, trial_id = best
        self._brackets[self._assigned[trial_id]].promoted.setdefault(milestone, set()).add(trial_id)
        return trial_id


class AsyncHyperBandScheduler(ASHAScheduler):
    """ASHA with several brackets (HyperBand's aggressiveness levels, run asynchronously)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("brackets", 3)
        super().__init__(**kwargs)
