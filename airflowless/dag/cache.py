"""Cache keys: a stage's code and its inputs, and the keys of the stages it reads.

A node's key changes when its stage's source (or ``version``) changes, when
any argument changes, or when any upstream node's key changes — so a changed
upstream stage invalidates everything downstream of it.

Relative paths are keyed by where they point: an argument that is a
``pathlib`` path, or a string that reads as a relative local path (it holds
a ``/`` or starts with ``.`` or ``~``, and is not a URL), enters the key
resolved against the current working directory. The same ``data/taxi-s`` in
two checkouts is two keys; a bare word such as ``"data"`` is not taken for a
path (write ``"./data"`` or type the parameter as ``Path``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import PurePath
from typing import Any

from dask.base import tokenize

from .graph import Graph, StageRef

__all__ = ["cache_keys", "element_key", "key_of_path"]


def key_of_path(value: Any) -> Any:
    """What ``value`` contributes to a key: a relative path resolved against the working directory."""
    if isinstance(value, PurePath):
        return ("path", os.path.abspath(os.path.expanduser(str(value))))
    if (isinstance(value, str) and value and "://" not in value and "\n" not in value and len(value) < 4096
            and not os.path.isabs(value) and ("/" in value or os.sep in value or value.startswith((".", "~")))):
        return ("path", os.path.abspath(os.path.expanduser(value)))
    return value


def _inputs(value: Any, keys: dict[str, str]) -> Any:
    if isinstance(value, StageRef):
        return ("stage-output", keys[value.node])
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_inputs(item, keys) for item in value]
    if isinstance(value, dict):
        return {key: _inputs(item, keys) for key, item in value.items()}
    return key_of_path(value)


def cache_keys(graph: Graph, order: list[str]) -> dict[str, str]:
    """The cache key of every node, ``order`` being a topological order."""
    keys: dict[str, str] = {}
    for name in order:
        node = graph.nodes[name]
        inputs = _inputs((node.args, node.kwargs) if not node.mapped else (("map", node.over), node.args, node.kwargs),
                         keys)
        digest = hashlib.sha256(f"{node.stage.code_hash}\0{tokenize(inputs, ensure_deterministic=False)}".encode())
        keys[name] = digest.hexdigest()[:32]
    return keys


def element_key(code_hash: str, call: tuple[Any, ...], keys: dict[str, str]) -> str:
    """The cache key of one item's call of a mapped stage: keyed by the item's value, not its place."""
    digest = hashlib.sha256(f"{code_hash}\0{tokenize(_inputs(call, keys), ensure_deterministic=False)}".encode())
    return digest.hexdigest()[:32]
