"""Searchers suggest configs and learn from results.

Call order, per trial: ``suggest(trial_id)`` (a config, or ``None`` for "none
right now", or :data:`FINISHED`), then ``on_trial_result`` for each report,
then ``on_trial_complete`` once. ``get_state`` / ``set_state`` round-trip
what the searcher learned, for ``Tuner.restore``.

To add a searcher: a :class:`Searcher` subclass in a module of its own here
(import its library inside the methods, so that airflowless imports without
it), its name in ``search/__init__.py``, and tests in
``tests/tune/test_searchers.py`` that drive suggest and complete and round-trip
its state, without a cluster.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from .variants import flatten

__all__ = ["Searcher", "FINISHED", "BasicVariantGenerator", "ConcurrencyLimiter"]

FINISHED = "FINISHED"


class Searcher:
    metric: str | None = None
    mode: str | None = None

    def set_search_properties(self, metric: str | None, mode: str | None, space: dict[str, Any],
                              num_samples: int, seed: int | None) -> None:
        self.metric = self.metric or metric
        self.mode = self.mode or mode

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None: ...

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None: ...

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None: ...


class BasicVariantGenerator(Searcher):
    """Random sampling and grid search: every grid point ``num_samples`` times."""

    def __init__(self, *, max_concurrent: int = 0, random_state: int | None = None) -> None:
        self.max_concurrent = max_concurrent
        self.random_state = random_state
        self._configs: list[dict[str, Any]] = []
        self._given = 0

    def set_search_properties(self, metric: str | None, mode: str | None, space: dict[str, Any],
                              num_samples: int, seed: int | None) -> None:
        from .variants import iter_configs

        super().set_search_properties(metric, mode, space, num_samples, seed)
        self._configs = list(iter_configs(space, num_samples, self.random_state if self.random_state is not None
                                          else seed))

    @property
    def total(self) -> int:
        return len(self._configs)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._given >= len(self._configs):
            return FINISHED
        config = self._configs[self._given]
        self._given += 1
        return config

    def get_state(self) -> dict[str, Any]:
        return {"given": self._given, "configs": self._configs}

    def set_state(self, state: dict[str, Any]) -> None:
        self._given = state["given"]
        self._configs = state["configs"]


class ConcurrencyLimiter(Searcher):
    """At most ``max_concurrent`` suggested trials unfinished at once."""

    def __init__(self, searcher: Searcher, max_concurrent: int) -> None:
        if max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self._live: set[str] = set()

    def set_search_properties(self, metric: str | None, mode: str | None, space: dict[str, Any],
                              num_samples: int, seed: int | None) -> None:
        self.searcher.set_search_properties(metric, mode, space, num_samples, seed)
        self.metric, self.mode = self.searcher.metric, self.searcher.mode

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if len(self._live) >= self.max_concurrent:
            return None
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self._live.add(trial_id)
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self._live.discard(trial_id)
        self.searcher.on_trial_complete(trial_id, result, error)

    def get_state(self) -> dict[str, Any]:
        return {"inner": self.searcher.get_state(), "live": sorted(self._live)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.searcher.set_state(state["inner"])
        self._live = set(state["live"])


def checked_points(points: Any) -> list[dict[str, Any]]:
    """A searcher's ``points_to_evaluate`` (Ray's argument): configs tried first, in order; [] for None."""
    if points is not None and not (isinstance(points, list) and all(isinstance(p, dict) for p in points)):
        raise ConfigError(f"points_to_evaluate is a list of configs (dicts), got {points!r}")
    return list(points or [])


def flat_point(point: dict[str, Any], sampled: Any) -> dict[str, Any]:
    """``point`` as ``"a/b"`` names -> values; every name must be one of ``sampled`` (the space's sampled keys)."""
    given = {"/".join(path): value for path, value in flatten(point).items()}
    unknown = sorted(set(given) - set(sampled))
    if unknown:
        raise ConfigError(f"points_to_evaluate names {unknown}, which the param space does not sample; "
                          f"it samples {sorted(sampled)}")
    return given
