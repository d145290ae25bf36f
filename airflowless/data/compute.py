"""Ray's ``compute=`` strategies for ``map_batches``, and what they mean on Dask: a bound on concurrent tasks.

A class given to ``map_batches`` is built once per worker process and kept
(airflowless's "actor"), so an actor pool is the set of worker processes that
run the operator's tasks; ``ActorPoolStrategy(size=n)`` and ``concurrency=n``
let at most ``n`` of its tasks run at once. Ray's autoscaling ranges,
``ActorPoolStrategy(min_size=, max_size=)`` and ``concurrency=(min, max)``,
bound it by ``max``: Dask starts tasks as workers free up, so there is no pool
to grow or shrink.

>>> concurrency_bound((1, 4), None)
4
>>> concurrency_bound(None, ActorPoolStrategy(size=2))
2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["ActorPoolStrategy", "TaskPoolStrategy", "concurrency_bound"]


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class ActorPoolStrategy:
    """Ray's actor pool: ``size=n``, or ``min_size=``/``max_size=`` (bounded by ``max_size``)."""

    size: int | None = None
    min_size: int | None = None
    max_size: int | None = None
    max_tasks_in_flight_per_actor: int | None = None  # Ray's; accepted, nothing to tune here

    def __post_init__(self) -> None:
        if self.size is not None and (self.min_size is not None or self.max_size is not None):
            raise ConfigError("ActorPoolStrategy takes size= or min_size=/max_size=, not both")
        for name in ("size", "min_size", "max_size"):
            if getattr(self, name) is not None:
                _count(getattr(self, name), f"ActorPoolStrategy({name}=)")
        if self.min_size is not None and self.max_size is not None and self.min_size > self.max_size:
            raise ConfigError(f"ActorPoolStrategy min_size ({self.min_size}) is more than max_size ({self.max_size})")

    @property
    def bound(self) -> int | None:
        return self.size if self.size is not None else self.max_size


@dataclass(frozen=True)
class TaskPoolStrategy:
    """Ray's task pool: ``size=n`` tasks at once at most (None: as many as the cluster runs)."""

    size: int | None = None

    @property
    def bound(self) -> int | None:
        return None if self.size is None else _count(self.size, "TaskPoolStrategy(size=)")


def concurrency_bound(concurrency: Any, compute: Any) -> int | None:
    """How many of an operator's tasks may run at once, from ``concurrency=`` (an int or Ray's
    ``(min, max)``) and ``compute=`` (a strategy, or Ray's ``"tasks"``/``"actors"``)."""
    if concurrency is not None and compute is not None and not isinstance(compute, str):
        raise ConfigError("map_batches takes concurrency= or compute=, not both")
    if isinstance(concurrency, tuple | list):
        if len(concurrency) != 2:
            raise ConfigError(f"concurrency is an int or a (min, max) pair, got {concurrency!r}")
        low, high = (_count(v, "each of concurrency's (min, max)") for v in concurrency)
        if low > high:
            raise ConfigError(f"concurrency's min ({low}) is more than its max ({high})")
        return high
    if concurrency is not None:
        return _count(concurrency, "concurrency")
    if isinstance(compute, ActorPoolStrategy | TaskPoolStrategy):
        return compute.bound
    if compute is None or compute in ("tasks", "actors"):
        return None
    raise ConfigError(f"compute= takes ActorPoolStrategy(...), TaskPoolStrategy(...), 'tasks' or 'actors', "
                      f"got {compute!r}")
