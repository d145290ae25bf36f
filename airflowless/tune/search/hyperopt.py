"""HyperOptSearch: HyperOpt's TPE behind the Searcher interface (its Trials driven ask-and-tell)."""

from __future__ import annotations

import base64
import math
from typing import Any

import cloudpickle

from ..._library_internals import hyperopt_trial_doc
from ...errors import ConfigError
from .searcher import FINISHED, Searcher, checked_points, flat_point
from .space import Categorical, Domain, Float, Function, GridSearch, Integer
from .variants import flatten, unflatten

__all__ = ["HyperOptSearch"]


def _translate(label: str, domain: Domain) -> Any:
    from hyperopt import hp
    from hyperopt.pyll import scope

    if isinstance(domain, Float):
        if domain.mean is not None:
            return hp.normal(label, domain.mean, domain.sd or 1.0) if domain.q is None else \
                hp.qnormal(label, domain.mean, domain.sd or 1.0, domain.q)
        low, high = domain.lower, domain.upper
        assert low is not None and high is not None
        if domain.log:
            return hp.loguniform(label, math.log(low), math.log(high)) if domain.q is None else \
                hp.qloguniform(label, math.log(low), math.log(high), domain.q)
        return hp.uniform(label, low, high) if domain.q is None else hp.quniform(label, low, high, domain.q)
    if isinstance(domain, Integer):
        if domain.log:
            return scope.int(hp.qloguniform(label, math.log(domain.lower), math.log(domain.upper - 1), domain.q or 1))
        if domain.q:
            return scope.int(hp.quniform(label, domain.lower, domain.upper - 1, domain.q))
        return hp.randint(label, domain.lower, domain.upper)
    if isinstance(domain, Categorical):
        return hp.choice(label, list(domain.categories))
    raise ConfigError(f"HyperOptSearch cannot translate {type(domain).__name__} at {label}")


class HyperOptSearch(Searcher):
    """Suggest configs with HyperOpt's TPE; ``seed`` makes the search repeatable.

    ``n_initial_points`` random configs come first (TPE's startup), as in HyperOpt.
    ``points_to_evaluate``: configs (as the param space nests them, every sampled key) tried first, in
    order, before TPE suggests any; TPE learns from their results too (Ray's argument).
    """

    def __init__(self, *, metric: str | None = None, mode: str | None = None, n_initial_points: int = 20,
                 seed: int | None = None, points_to_evaluate: list[dict[str, Any]] | None = None) -> None:
        self.metric, self.mode = metric, mode
        self.n_initial_points, self.seed = n_initial_points, seed
        self.points_to_evaluate = checked_points(points_to_evaluate)
        self._points: list[dict[str, Any]] = []  # hyperopt's values of the points not suggested yet
        self._space: dict[str, Any] = {}
        self._trials: Any = None
        self._live: dict[str, int] = {}
        self._remaining = 0
        self._rng: Any = None

    def set_search_properties(self, metric: str | None, mode: str | None, space: dict[str, Any],
                              num_samples: int, seed: int | None) -> None:
        import numpy as np
        from hyperopt import Trials

        super().set_search_properties(metric, mode, space, num_samples, seed)
        if self.metric is None or self.mode not in ("min", "max"):
            raise ConfigError("HyperOptSearch needs metric= and mode='min'|'max' (in TuneConfig or here)")
        flat = flatten(space)
        self._space = {}
        for path, value in flat.items():
            label = "/".join(path)
            if isinstance(value, (GridSearch, Function)):
                raise ConfigError(f"HyperOptSearch cannot use {type(value).__name__} at {label}")
            self._space[label] = _translate(label, value) if isinstance(value, Domain) else value
        self._trials = Trials()
        self._points = [self._values(point, flat) for point in self.points_to_evaluate]
        self._remaining = num_samples
        self._rng = np.random.default_rng(self.seed if self.seed is not None else seed)

    @staticmethod
    def _values(point: dict[str, Any], flat: dict[tuple[str, ...], Any]) -> dict[str, Any]:
        """A point as hyperopt records a trial's values: a choice by its index."""
        sampled = {"/".join(path): value for path, value in flat.items() if isinstance(value, Domain)}
        given = flat_point(point, sampled)
        missing = sorted(set(sampled) - set(given))
        if missing:
            raise ConfigError(f"a point to evaluate for HyperOptSearch gives every sampled key; {point!r} "
                              f"misses {missing}")
        values = {}
        for label, value in given.items():
            domain = sampled[label]
            if isinstance(domain, Categorical):
                if value not in domain.categories:
                    raise ConfigError(f"points_to_evaluate gives {label}={value!r}, not one of its choices "
                                      f"{list(domain.categories)}")
                value = list(domain.categories).index(value)
            values[label] = value
        return values

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        from functools import partial

        from hyperopt import base, space_eval, tpe
        from hyperopt.fmin import generate_trial

        if self._remaining <= 0:
            return FINISHED
        self._remaining -= 1
        domain = base.Domain(lambda config: config, self._space)
        new_ids = self._trials.new_trial_ids(1)
        self._trials.refresh()
        if self._points:  # a point to evaluate, recorded as TPE records its own suggestions
            docs = [generate_trial(new_ids[0], self._points.pop(0))]
        else:
            algo = partial(tpe.suggest, n_startup_jobs=self.n_initial_points)
            docs = algo(new_ids, domain, self._trials, int(self._rng.integers(2**31)))
        self._trials.insert_trial_docs(docs)
        self._trials.refresh()
        values = {k: v[0] for k, v in docs[0]["misc"]["vals"].items() if v}
        self._live[trial_id] = docs[0]["tid"]
        flat = space_eval(self._space, values)
        return unflatten({tuple(k.split("/")): v for k, v in flat.items()})

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        from hyperopt import JOB_STATE_DONE, JOB_STATE_ERROR, STATUS_FAIL, STATUS_OK

        tid = self._live.pop(trial_id, None)
        if tid is None:
            return
        doc = hyperopt_trial_doc(self._trials, tid)
        if error or not result or self.metric not in result:
            doc["result"] = {"status": STATUS_FAIL}
            doc["state"] = JOB_STATE_ERROR
        else:
            value = float(result[self.metric])
            doc["result"] = {"loss": value if self.mode == "min" else -value, "status": STATUS_OK}
            doc["state"] = JOB_STATE_DONE
        self._trials.refresh()

    def get_state(self) -> dict[str, Any]:
        return {"trials": base64.b64encode(cloudpickle.dumps((self._trials, self._live, self._rng))).decode(),
                "remaining": self._remaining, "points": self._points}

    def set_state(self, state: dict[str, Any]) -> None:
        self._trials, self._live, self._rng = cloudpickle.loads(base64.b64decode(state["trials"]))
        self._remaining = state["remaining"]
        self._points = list(state.get("points", []))
