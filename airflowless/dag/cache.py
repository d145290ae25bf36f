"""Cache keys: a stage's code and its inputs, and the keys of the stages it reads.

A node's key changes when its stage's source (or ``version``) changes, when
any argument changes, or when any upstream node's key changes — so a changed
upstream stage invalidates everything downstream of it.

A path argument is keyed by the files under it, not by its text
(:mod:`.fingerprint`): a relative path by where it points, and a file changed,
added or removed under it is a miss. ``@stage(cache_key=fn)`` keys a stage by
what ``fn`` returns instead of by its arguments: ``fn`` gets the stage's
arguments, each upstream stage's output given as that stage's key (a string),
and what it returns is keyed as an argument would be (paths in it by their
files; bytes as they are).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from dask.base import tokenize

from ..errors import ConfigError
from .fingerprint import Fingerprints
from .graph import Graph, StageRef, map_refs

if TYPE_CHECKING:
    from .stage import Stage

__all__ = ["cache_keys", "element_key"]


def _inputs(value: Any, keys: dict[str, str], prints: Fingerprints) -> Any:
    if isinstance(value, StageRef):
        return ("stage-output", keys[value.node])
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_inputs(item, keys, prints) for item in value]
    if isinstance(value, dict):
        return {key: _inputs(item, keys, prints) for key, item in value.items()}
    return prints.of(value)


def _key(stage: Stage, call: tuple[Any, ...], keys: dict[str, str], prints: Fingerprints) -> str:
    custom = stage.options.cache_key
    if custom is None:
        inputs = _inputs(call, keys, prints)
    else:
        args, kwargs = map_refs(call, lambda ref: keys[ref.node])
        try:
            made = custom(*args, **kwargs)
        except Exception as exc:
            raise ConfigError(f"the cache_key function of stage {stage.name!r} raised {type(exc).__name__}: {exc}; "
                              "it gets the stage's arguments (an upstream stage's output as its key, a string) "
                              "and returns what the stage's output depends on") from exc
        inputs = ("custom", _inputs(made, keys, prints))
    return _digest(stage, inputs)


def _digest(stage: Stage, inputs: Any) -> str:
    digest = hashlib.sha256(f"{stage.code_hash}\0{tokenize(inputs, ensure_deterministic=False)}".encode())
    return digest.hexdigest()[:32]


def cache_keys(graph: Graph, order: list[str], prints: Fingerprints | None = None) -> dict[str, str]:
    """The cache key of every node, ``order`` being a topological order (``prints``: the run's path listings)."""
    prints = prints or Fingerprints()
    keys: dict[str, str] = {}
    for name in order:
        node = graph.nodes[name]
        if node.mapped:  # the whole map: keyed by its list and fixed arguments (each item has its own key)
            keys[name] = _digest(node.stage, _inputs((("map", node.over), node.args, node.kwargs), keys, prints))
        else:
            keys[name] = _key(node.stage, (node.args, node.kwargs), keys, prints)
    return keys


def element_key(stage: Stage, call: tuple[Any, ...], keys: dict[str, str], prints: Fingerprints) -> str:
    """The cache key of one item's call of a mapped stage: keyed by the item's value, not its place."""
    return _key(stage, call, keys, prints)
