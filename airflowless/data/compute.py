"""Ray's ``compute=`` strategies for ``map_batches``, and what they mean on Dask.

A class given to ``map_batches`` is built once per worker process and kept
(airflowless's "actor"). With an actor pool (``ActorPoolStrategy(size=n)``,
``ActorPoolStrategy(min_size=, max_size=)``, or ``concurrency=n`` /
``concurrency=(min, max)`` for a class), the operator's tasks run on a pool of
workers (:mod:`.execution.pools`): ``min`` of them at first, one more each time
every member is busy while blocks wait, up to ``max`` (``None``: every worker);
so at most ``max`` instances exist, each running one task at a time, and they
are let go when the operator's last block is done, as Ray's actors are. For a
function, ``concurrency`` bounds how many of its tasks run at once.

>>> concurrency_bound((1, 4), None)
4
>>> concurrency_bound(None, ActorPoolStrategy(size=2))
2
>>> actor_pool((1, 4), None, is_class=True), actor_pool(3, None, is_class=False)
((1, 4), None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["ActorPoolStrategy", "TaskPoolStrategy", "actor_pool", "concurrency_bound"]


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class ActorPoolStrategy:
    """Ray's actor pool: ``size=n`` workers' instances, or ``min_size=`` growing to ``max_size=`` while work waits."""

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


def actor_pool(concurrency: Any, compute: Any, *, is_class: bool) -> tuple[int, int | None] | None:
    """``(min, max)`` workers of the pool a class's tasks run on (``max`` None: as many as there are), or None:
    a function, or a class given no pool (its instances are kept on whichever workers run its tasks)."""
    concurrency_bound(concurrency, compute)  # the same checks and errors
    if not is_class:
        return None
    if isinstance(compute, ActorPoolStrategy):
        if compute.size is not None:
            return compute.size, compute.size
        return compute.min_size or 1, compute.max_size
    if isinstance(concurrency, tuple | list):
        return int(concurrency[0]), int(concurrency[1])
    if concurrency is not None:
        return int(concurrency), int(concurrency)
    if compute == "actors":
        return 1, None
    return None
