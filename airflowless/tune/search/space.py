"""Search spaces: distributions to sample parameters from, nested in plain dicts.

>>> space = {"params": {"eta": uniform(0.2, 0.4), "max_depth": randint(1, 6)}}
>>> import random
>>> uniform(0.2, 0.4).sample(random.Random(0)) < 0.4
True
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError

__all__ = ["Domain", "Float", "Integer", "Categorical", "Function", "GridSearch", "uniform", "quniform",
           "loguniform", "qloguniform", "randn", "qrandn", "randint", "qrandint", "lograndint", "qlograndint",
           "choice", "grid_search", "sample_from"]


class Domain:
    """A distribution of one parameter."""

    def sample(self, rng: random.Random, spec: Any = None) -> Any:
        raise NotImplementedError


def _quantize(value: float, q: float | None) -> float:
    return value if q is None else round(value / q) * q


@dataclass(frozen=True)
class Float(Domain):
    lower: float | None
    upper: float | None
    log: bool = False
    q: float | None = None
    mean: float | None = None  # set for normal distributions
    sd: float | None = None

    def __post_init__(self) -> None:
        if self.mean is None:
            if self.lower is None or self.upper is None or not self.lower < self.upper:
                raise ConfigError(f"a float range needs lower < upper, got ({self.lower}, {self.upper})")
            if self.log and self.lower <= 0:
                raise ConfigError(f"a log-uniform range needs lower > 0, got {self.lower}")
        if self.q is not None and self.q <= 0:
            raise ConfigError(f"the quantization q must be > 0, got {self.q}")

    def sample(self, rng: random.Random, spec: Any = None) -> float:
        if self.mean is not None:
            return _quantize(rng.gauss(self.mean, self.sd or 1.0), self.q)
        assert self.lower is not None and self.upper is not None
        if self.log:
            value = math.exp(rng.uniform(math.log(self.lower), math.log(self.upper)))
        else:
            value = rng.uniform(self.lower, self.upper)
        return min(max(_quantize(value, self.q), self.lower), self.upper)


@dataclass(frozen=True)
class Integer(Domain):
    """Integers in ``[lower, upper)`` (upper excluded, as Ray's randint)."""

    lower: int
    upper: int
    log: bool = False
    q: int | None = None

    def __post_init__(self) -> None:
        if not self.lower < self.upper:
            raise ConfigError(f"an integer range needs lower < upper, got ({self.lower}, {self.upper})")
        if self.log and self.lower <= 0:
            raise ConfigError(f"a log integer range needs lower > 0, got {self.lower}")
        if self.q is not None and self.q <= 0:
            raise ConfigError(f"the quantization q must be > 0, got {self.q}")

    def sample(self, rng: random.Random, spec: Any = None) -> int:
        if self.log:
            value = int(math.exp(rng.uniform(math.log(self.lower), math.log(self.upper))))
        else:
            value = rng.randrange(self.lower, self.upper)
        if self.q:
            value = int(round(value / self.q) * self.q)
        return min(max(value, self.lower), self.upper - 1 if not self.q else self.upper)


@dataclass(frozen=True)
class Categorical(Domain):
    categories: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.categories:
            raise ConfigError("choice needs at least one category")

    def sample(self, rng: random.Random, spec: Any = None) -> Any:
        return self.categories[rng.randrange(len(self.categories))]


@dataclass(frozen=True)
class Function(Domain):
    """``fn(spec)`` where ``spec.config`` holds the values sampled so far."""

    fn: Callable[..., Any]

    def sample(self, rng: random.Random, spec: Any = None) -> Any:
        # called once: an error of fn's own (a TypeError too) is raised as it is
        return self.fn(spec) if _takes_an_argument(self.fn) else self.fn()


def _takes_an_argument(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it the spec
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


@dataclass(frozen=True)
class GridSearch:
    """Every value, once per sample (not random)."""

    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ConfigError("grid_search needs at least one value")


def uniform(lower: float, upper: float) -> Float:
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float) -> Float:
    return Float(lower, upper, log=True)


def qloguniform(lower: float, upper: float, q: float) -> Float:
    return Float(lower, upper, log=True, q=q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Float:
    return Float(None, None, mean=mean, sd=sd)


def qrandn(mean: float, sd: float, q: float) -> Float:
    return Float(None, None, q=q, mean=mean, sd=sd)


def randint(lower: int, upper: int) -> Integer:
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int) -> Integer:
    return Integer(lower, upper, log=True)


def qlograndint(lower: int, upper: int, q: int) -> Integer:
    return Integer(lower, upper, log=True, q=q)


def choice(categories: Sequence[Any]) -> Categorical:
    return Categorical(tuple(categories))


def grid_search(values: Sequence[Any]) -> GridSearch:
    return GridSearch(tuple(values))


def sample_from(fn: Callable[..., Any]) -> Function:
    return Function(fn)
