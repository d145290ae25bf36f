"""Trial schedulers decide, after each result, whether a trial continues, pauses or stops.

Call order: ``set_search_properties`` once, then per trial ``on_trial_add``,
``on_trial_result`` (returns a :class:`Decision`) for each report, and
``on_trial_complete`` or ``on_trial_remove`` once. Whenever there is room for
another trial, ``choose_trial_to_resume`` is asked first which paused trial
should go on (None: start a new one). A scheduler sees trials through a
read-only :class:`TrialView`; it does no I/O.

To add a scheduler: a :class:`TrialScheduler` subclass in a module of its own
here, its name in ``schedulers/__init__.py`` (and ``tune/__init__.py`` where
Ray users look for it), and tests in ``tests/tune/test_schedulers.py`` that feed
it results and check its decisions, without a cluster.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Decision", "TrialView", "TrialScheduler", "FIFOScheduler"]


class Decision(enum.Enum):
    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"


@dataclass(frozen=True)
class TrialView:
    trial_id: str
    config: dict[str, Any]
    iteration: int


class TrialScheduler:
    metric: str | None = None
    mode: str | None = None
    time_attr: str = "training_iteration"

    def set_search_properties(self, metric: str | None, mode: str | None) -> None:
        self.metric = self.metric or metric
        self.mode = self.mode or mode

    def _score(self, result: dict[str, Any]) -> float | None:
        value = result.get(self.metric) if self.metric else None
        if value is None:
            return None
        return float(value) if self.mode != "min" else -float(value)

    def on_trial_add(self, trial: TrialView) -> None: ...

    def on_trial_result(self, trial: TrialView, result: dict[str, Any]) -> Decision:
        return Decision.CONTINUE

    def on_trial_complete(self, trial: TrialView, result: dict[str, Any] | None) -> None: ...

    def choose_trial_to_resume(self, paused: Sequence[TrialView], *, idle: bool) -> str | None:
        """Which of the ``paused`` trials (paused by a PAUSE decision, their runs stopped) goes on now.

        ``idle`` is True when no new trial can start and none runs: a paused trial
        not chosen then is stopped for good.
        """
        return None

    def on_trial_remove(self, trial: TrialView) -> None: ...

    @property
    def needs_results_promptly(self) -> bool:
        """True when decisions stop trials early (trials then check for a stop at every report)."""
        return True


class FIFOScheduler(TrialScheduler):
    """Every trial runs to its end."""

    @property
    def needs_results_promptly(self) -> bool:
        return False
