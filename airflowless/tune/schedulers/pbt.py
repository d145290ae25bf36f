"""Population based training: bad trials copy a good trial's checkpoint and explore near its config.

Every ``perturbation_interval`` (in ``time_attr``), a trial in the bottom
``quantile_fraction`` of the population is paused; it then restarts from the
checkpoint of a trial in the top fraction (exploit), with that trial's config
perturbed (explore): a value from ``hyperparam_mutations`` is resampled with
probability ``resample_probability``, otherwise multiplied by one of
``perturbation_factors`` (numbers) or moved to a neighbouring choice (lists).
Trials must report checkpoints for PBT to have something to copy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ..search.space import Domain
from .base import Decision, TrialScheduler, TrialView

__all__ = ["PopulationBasedTraining"]


@dataclass
class PopulationBasedTraining(TrialScheduler):
    metric: str | None = None
    mode: str | None = None
    time_attr: str = "training_iteration"
    perturbation_interval: float = 5
    quantile_fraction: float = 0.25
    hyperparam_mutations: dict[str, Any] = field(default_factory=dict)
    resample_probability: float = 0.25
    perturbation_factors: tuple[float, float] = (1.2, 0.8)
    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False)
    _scores: dict[str, float] = field(default_factory=dict, repr=False)
    _configs: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    _checkpoints: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)
    _last: dict[str, float] = field(default_factory=dict, repr=False)
    _exploits: dict[str, tuple[dict[str, Any], str, int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.hyperparam_mutations:
            raise ConfigError("PopulationBasedTraining needs hyperparam_mutations, e.g. {'lr': tune.loguniform(1e-4, 1e-1)}")
        if not 0 < self.quantile_fraction <= 0.5:
            raise ConfigError(f"quantile_fraction must be in (0, 0.5], got {self.quantile_fraction}")
        if self.perturbation_interval <= 0:
            raise ConfigError(f"perturbation_interval must be > 0, got {self.perturbation_interval}")
        self._rng = random.Random(self.seed)

    def on_trial_add(self, trial: TrialView) -> None:
        self._configs[trial.trial_id] = trial.config
        self._last.setdefault(trial.trial_id, 0.0)

    def on_trial_result(self, trial: TrialView, result: dict[str, Any]) -> Decision:
        t = float(result.get(self.time_attr, trial.iteration))
        score = self._score(result)
        if score is not None:
            self._scores[trial.trial_id] = score
        if result.get("checkpoint_uri"):
            self._checkpoints[trial.trial_id] = (result["checkpoint_uri"], int(result.get("training_iteration", t)))
        if t - self._last.get(trial.trial_id, 0.0) < self.perturbation_interval or score is None:
            return Decision.CONTINUE
        self._last[trial.trial_id] = t
        ranked = sorted(self._scores, key=lambda tid: self._scores[tid])
        cut = max(1, int(len(ranked) * self.quantile_fraction))
        if len(ranked) < 2 or trial.trial_id not in ranked[:cut]:
            return Decision.CONTINUE
        donors = [tid for tid in ranked[-cut:] if tid in self._checkpoints and tid != trial.trial_id]
        if not donors:
            return Decision.CONTINUE
        donor = self._rng.choice(donors)
        uri, iteration = self._checkpoints[donor]
        self._exploits[trial.trial_id] = (self._explore(self._configs[donor]), uri, iteration)
        return Decision.PAUSE

    def exploit_for(self, trial_id: str) -> tuple[dict[str, Any], str, int] | None:
        """(new config, donor checkpoint, its iteration) for a paused trial, once."""
        exploit = self._exploits.pop(trial_id, None)
        if exploit is not None:
            self._configs[trial_id] = exploit[0]
            self._last[trial_id] = float(exploit[2])
        return exploit

    def _explore(self, config: dict[str, Any]) -> dict[str, Any]:
        return _mutate(config, self.hyperparam_mutations, self)


def _mutate(config: dict[str, Any], mutations: dict[str, Any], pbt: PopulationBasedTraining) -> dict[str, Any]:
    out = dict(config)
    rng = pbt._rng
    for key, spec in mutations.items():
        if isinstance(spec, dict):
            out[key] = _mutate(dict(config.get(key, {})), spec, pbt)
            continue
        current = config.get(key)
        resample = rng.random() < pbt.resample_probability or current is None
        if isinstance(spec, (list, tuple)):
            if resample or current not in spec:
                out[key] = rng.choice(list(spec))
            else:
                index = list(spec).index(current) + rng.choice([-1, 1])
                out[key] = list(spec)[min(max(index, 0), len(spec) - 1)]
        elif isinstance(spec, Domain):
            if resample or not isinstance(current, (int, float)):
                out[key] = spec.sample(rng)
            else:
                value = current * rng.choice(pbt.perturbation_factors)
                out[key] = int(round(value)) if isinstance(current, int) else value
        elif callable(spec):
            out[key] = spec()
        else:
            raise ConfigError(f"hyperparam_mutations[{key!r}] must be a list, a tune distribution or a function, "
                              f"got {spec!r}")
    return out
