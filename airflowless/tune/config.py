"""TuneConfig: what to search, how many trials, and how they are scheduled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["TuneConfig"]


@dataclass(frozen=True, kw_only=True)
class TuneConfig:
    """``num_samples`` trials (times every grid point), at most ``max_concurrent_trials`` at once.

    ``metric``/``mode`` define "best" (and drive searchers and schedulers);
    ``trial_resources`` is what a function trial's task declares (default ``{"CPU": 1}``;
    a Trainer trial takes its ScalingConfig's resources instead).
    ``max_errored_trials``: ``fit()`` raises :class:`~airflowless.errors.TrialsErroredError`
    when more trials than this errored. ``None`` (the default): inside a pipeline stage
    none may (the stage fails instead of succeeding on a partial search); elsewhere
    ``fit()`` returns the grid with its errors, as Ray Tune does.
    """

    metric: str | None = None
    mode: str | None = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    search_alg: Any = None
    scheduler: Any = None
    seed: int | None = None
    trial_resources: dict[str, float] | None = None
    max_failures: int = 0
    max_errored_trials: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in (None, "min", "max"):
            raise ConfigError(f"TuneConfig.mode must be 'min' or 'max', got {self.mode!r}")
        if (self.metric is None) != (self.mode is None):
            raise ConfigError("TuneConfig needs metric and mode together (e.g. metric='loss', mode='min')")
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ConfigError(f"TuneConfig.num_samples must be an integer >= 1, got {self.num_samples!r}")
        if self.max_concurrent_trials is not None and self.max_concurrent_trials < 1:
            raise ConfigError(f"TuneConfig.max_concurrent_trials must be >= 1, got {self.max_concurrent_trials}")
        if self.max_errored_trials is not None and (not isinstance(self.max_errored_trials, int)
                                                    or self.max_errored_trials < 0):
            raise ConfigError(f"TuneConfig.max_errored_trials must be an integer >= 0 or None, "
                              f"got {self.max_errored_trials!r}")
        if self.max_failures < 0:
            raise ConfigError(f"TuneConfig.max_failures must be >= 0, got {self.max_failures}")
