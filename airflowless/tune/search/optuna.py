"""OptunaSearch: Optuna's samplers (TPE by default) behind the Searcher interface, ask-and-tell."""

from __future__ import annotations

import base64
from typing import Any

import cloudpickle

from ..._library_internals import optuna_storage_id
from ...errors import ConfigError
from .searcher import FINISHED, Searcher, checked_points, flat_point
from .space import Categorical, Domain, Float, Function, GridSearch, Integer
from .variants import Path, flatten, unflatten

__all__ = ["OptunaSearch"]


def _distribution(path: Path, domain: Domain) -> Any:
    import optuna.distributions as od

    if isinstance(domain, Float):
        if domain.mean is not None:
            raise ConfigError(f"OptunaSearch cannot sample a normal distribution ({'.'.join(path)}); use uniform")
        return od.FloatDistribution(domain.lower, domain.upper, log=domain.log,  # type: ignore[arg-type]
                                    step=None if domain.log else domain.q)
    if isinstance(domain, Integer):
        # randint excludes its upper bound, qrandint includes it (as Integer.sample does);
        # Optuna has no quantized log distribution, so q is dropped there (as for floats)
        return od.IntDistribution(domain.lower, domain.upper if domain.q else domain.upper - 1, log=domain.log,
                                  step=1 if domain.log else domain.q or 1)
    if isinstance(domain, Categorical):
        return od.CategoricalDistribution(list(domain.categories))
    raise ConfigError(f"OptunaSearch cannot translate {type(domain).__name__} at {'.'.join(path)}")


class OptunaSearch(Searcher):
    """Suggest configs with an Optuna sampler; ``seed`` makes the search repeatable.

    ``points_to_evaluate``: configs (as the param space nests them, sampled keys only) tried first, in order,
    before the sampler suggests any (Ray's argument; Optuna's ``enqueue_trial``)."""

    def __init__(self, *, metric: str | None = None, mode: str | None = None, sampler: Any = None,
                 seed: int | None = None, points_to_evaluate: list[dict[str, Any]] | None = None) -> None:
        self.metric, self.mode = metric, mode
        self.sampler, self.seed = sampler, seed
        self.points_to_evaluate = checked_points(points_to_evaluate)
        self._study: Any = None
        self._distributions: dict[str, Any] = {}
        self._constants: dict[Path, Any] = {}
        self._live: dict[str, Any] = {}
        self._remaining = 0

    def set_search_properties(self, metric: str | None, mode: str | None, space: dict[str, Any],
                              num_samples: int, seed: int | None) -> None:
        import optuna

        super().set_search_properties(metric, mode, space, num_samples, seed)
        if self.metric is None or self.mode not in ("min", "max"):
            raise ConfigError("OptunaSearch needs metric= and mode='min'|'max' (in TuneConfig or here)")
        for path, value in flatten(space).items():
            if isinstance(value, (GridSearch, Function)):
                raise ConfigError(f"OptunaSearch cannot use {type(value).__name__} at {'.'.join(path)}")
            if isinstance(value, Domain):
                self._distributions["/".join(path)] = _distribution(path, value)
            else:
                self._constants[path] = value
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = self.sampler or optuna.samplers.TPESampler(seed=self.seed if self.seed is not None else seed)
        self._study = optuna.create_study(direction="minimize" if self.mode == "min" else "maximize",
                                          sampler=sampler)
        for point in self.points_to_evaluate:  # asked before the sampler is
            self._study.enqueue_trial(flat_point(point, self._distributions))
        self._remaining = num_samples

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._remaining <= 0:
            return FINISHED
        self._remaining -= 1
        trial = self._study.ask(self._distributions)
        self._live[trial_id] = trial
        flat = {tuple(name.split("/")): value for name, value in trial.params.items()}
        return unflatten({**self._constants, **flat})

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._live.get(trial_id)
        if trial is not None and self.metric in result:
            step = int(result.get("training_iteration", 0))
            if step not in trial.storage.get_trial(optuna_storage_id(trial)).intermediate_values:
                trial.report(float(result[self.metric]), step)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        import optuna

        trial = self._live.pop(trial_id, None)
        if trial is None:
            return
        if error or not result or self.metric not in result:
            self._study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(trial, float(result[self.metric]))

    def get_state(self) -> dict[str, Any]:
        return {"study": base64.b64encode(cloudpickle.dumps(self._study)).decode(), "remaining": self._remaining,
                "live": {trial_id: optuna_storage_id(trial) for trial_id, trial in self._live.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        import optuna

        self._study = cloudpickle.loads(base64.b64decode(state["study"]))
        self._remaining = state["remaining"]
        # trials that were running: they run again and are told to the study when they end
        self._live = {trial_id: optuna.trial.Trial(self._study, number)
                      for trial_id, number in state.get("live", {}).items()}
