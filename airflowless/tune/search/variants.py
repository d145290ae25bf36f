"""Turning a nested param_space into concrete configs."""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from ...errors import ConfigError
from .space import Domain, Function, GridSearch

__all__ = ["flatten", "unflatten", "grid_points", "resolve", "check_space"]

Path = tuple[str, ...]


def flatten(space: dict[str, Any], prefix: Path = ()) -> dict[Path, Any]:
    """Leaves of nested dicts by path."""
    out: dict[Path, Any] = {}
    for key, value in space.items():
        if isinstance(value, dict):
            out.update(flatten(value, (*prefix, str(key))))
        else:
            out[(*prefix, str(key))] = value
    return out


def unflatten(flat: dict[Path, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def check_space(space: Any) -> dict[str, Any]:
    if space is None:
        return {}
    if not isinstance(space, dict):
        raise ConfigError(f"param_space must be a dict (nested dicts allowed), got {type(space).__name__}")
    for path, value in flatten(space).items():
        if isinstance(value, type) and issubclass(value, Domain):
            raise ConfigError(f"param_space[{'.'.join(path)}] is the class {value.__name__}; call it, "
                              "e.g. tune.uniform(0, 1)")
    return space


def grid_points(space: dict[str, Any]) -> list[dict[Path, Any]]:
    """Every combination of the grid_search values (one empty point when there is no grid).

    Ray's order: grid paths sorted, the first one varying fastest.
    """
    grids = {path: value.values for path, value in flatten(space).items() if isinstance(value, GridSearch)}
    if not grids:
        return [{}]
    paths = sorted(grids, reverse=True)  # itertools.product varies its last argument fastest
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*(grids[p] for p in paths))]


def resolve(space: dict[str, Any], grid: dict[Path, Any], rng: random.Random) -> dict[str, Any]:
    """A concrete config: grid values set, domains sampled, sample_from resolved last (seeing the rest)."""
    flat = flatten(copy.deepcopy(space))
    values: dict[Path, Any] = {}
    deferred: list[Path] = []
    for path, value in flat.items():
        if path in grid:
            values[path] = grid[path]
        elif isinstance(value, Function):
            deferred.append(path)
        elif isinstance(value, Domain):
            values[path] = value.sample(rng)
        else:
            values[path] = value
    for path in deferred:
        spec = SimpleNamespace(config=_namespace(unflatten(values)))
        values[path] = flat[path].sample(rng, spec)
    return unflatten(values)


class _namespace(dict):  # noqa: N801 - reads as spec.config.x or spec.config["x"]
    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return _namespace(value) if isinstance(value, dict) else value


def iter_configs(space: dict[str, Any], num_samples: int, seed: int | None) -> Iterator[dict[str, Any]]:
    """BasicVariantGenerator order: for each sample, every grid point."""
    rng = random.Random(seed)
    points = grid_points(space)
    for _ in range(num_samples):
        for point in points:
            yield resolve(space, point, rng)
