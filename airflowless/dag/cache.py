"""Cache keys: a stage's code and its inputs, and the keys of the stages it reads.

A node's key changes when its stage's source (or ``version``) changes, when
any argument changes, or when any upstream node's key changes — so a changed
upstream stage invalidates everything downstream of it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dask.base import tokenize

from .graph import Graph, map_refs

__all__ = ["cache_keys"]


def cache_keys(graph: Graph, order: list[str]) -> dict[str, str]:
    """The cache key of every node, ``order`` being a topological order."""
    keys: dict[str, str] = {}
    for name in order:
        node = graph.nodes[name]
        inputs: Any = map_refs((node.args, node.kwargs), lambda ref: ("stage-output", keys[ref.node]))
        digest = hashlib.sha256(f"{node.stage.code_hash}\0{tokenize(inputs, ensure_deterministic=False)}".encode())
        keys[name] = digest.hexdigest()[:32]
    return keys
