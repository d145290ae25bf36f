"""The graph of a pipeline: nodes (stage calls) and the references between them.

A graph is built by tracing a pipeline function (see :mod:`.trace`) or by hand
with :meth:`Graph.add`; :meth:`Graph.validate` checks it before anything runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import PipelineDefinitionError

if TYPE_CHECKING:
    from .stage import Stage

__all__ = ["StageRef", "Node", "Graph", "map_refs", "NOT_MAPPED"]


@dataclass(frozen=True)
class StageRef:
    """Stands for the output of node ``node`` of graph ``graph_id`` while tracing."""

    node: str
    graph_id: int

    def __repr__(self) -> str:
        return f"<output of {self.node}>"

    def __bool__(self) -> bool:
        raise PipelineDefinitionError(
            f"the output of stage {self.node!r} is only known when the pipeline runs; "
            "a pipeline function may not branch on it (move the condition into a stage)"
        )

    def __iter__(self) -> Iterator[Any]:
        raise PipelineDefinitionError(
            f"the output of stage {self.node!r} cannot be unpacked while the pipeline is "
            "defined; return one value (e.g. a dict) and pass it whole to the next stage"
        )


def map_refs(value: Any, fn: Callable[[StageRef], Any]) -> Any:
    """``value`` with every :class:`StageRef` inside lists, tuples and dicts replaced by ``fn(ref)``."""
    if isinstance(value, StageRef):
        return fn(value)
    if isinstance(value, (list, tuple)):
        mapped = [map_refs(item, fn) for item in value]
        return type(value)(mapped) if isinstance(value, list) else tuple(mapped)
    if isinstance(value, dict):
        return {key: map_refs(item, fn) for key, item in value.items()}
    return value


def refs_in(value: Any) -> list[StageRef]:
    found: list[StageRef] = []
    map_refs(value, found.append)
    return found


NOT_MAPPED: Any = type("NotMapped", (), {"__repr__": lambda self: "NOT_MAPPED"})()


@dataclass(frozen=True)
class Node:
    """One call of a stage: its arguments may hold references to other nodes.

    A *mapped* node (``stage.map(over, ...)``) stands for one call per item of
    ``over`` (a list, or a reference to a stage's output that is one), the item
    passed first, then ``args`` and ``kwargs``; its output is the list of theirs.
    """

    name: str
    stage: Stage
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    over: Any = NOT_MAPPED

    @property
    def mapped(self) -> bool:
        return self.over is not NOT_MAPPED

    @functools.cached_property
    def refs(self) -> list[StageRef]:
        """(Found once: a run asks for a node's inputs many times, and a reduce's may be thousands.)"""
        return refs_in((self.over, self.args, self.kwargs) if self.mapped else (self.args, self.kwargs))

    @functools.cached_property
    def upstream(self) -> list[str]:
        return list(dict.fromkeys(ref.node for ref in self.refs))


@dataclass
class Graph:
    """Nodes by name, in the order they were added; ``result`` is what the pipeline returned."""

    pipeline: str
    nodes: dict[str, Node] = field(default_factory=dict)
    result: Any = None
    _suffixes: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def id(self) -> int:
        return id(self)

    def add(self, node: Node) -> StageRef:
        if node.name in self.nodes:
            raise PipelineDefinitionError(f"pipeline {self.pipeline!r} already has a node {node.name!r}")
        self.nodes[node.name] = node
        return StageRef(node.name, self.id)

    def unique_name(self, base: str) -> str:
        if base not in self.nodes:
            return base
        n = self._suffixes.get(base, 2)  # where the last search for this base ended: a fan-out is not quadratic
        while f"{base}-{n}" in self.nodes:
            n += 1
        self._suffixes[base] = n + 1
        return f"{base}-{n}"

    def validate(self) -> list[str]:
        """Check references and cycles; return the nodes in an order where inputs come first."""
        if not self.nodes:
            raise PipelineDefinitionError(
                f"pipeline {self.pipeline!r} calls no stage; call at least one @stage function in it"
            )
        for node in self.nodes.values():
            for ref in node.refs:
                if ref.node not in self.nodes or ref.graph_id != self.id:
                    raise PipelineDefinitionError(
                        f"stage {node.name!r} of pipeline {self.pipeline!r} takes the output of "
                        f"{ref.node!r}, which is not a stage of this pipeline; pass outputs only "
                        "between stages called in the same pipeline function"
                    )
        return self._topological_order()

    def _topological_order(self) -> list[str]:
        order: list[str] = []
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = path[path.index(name):] + [name]
                raise PipelineDefinitionError(
                    f"pipeline {self.pipeline!r} has a cycle: {' -> '.join(cycle)}; "
                    "a stage cannot depend on its own output"
                )
            state[name] = 1
            for up in self.nodes[name].upstream:
                visit(up, [*path, name])
            state[name] = 2
            order.append(name)

        for name in self.nodes:
            visit(name, [])
        return order

    def downstream(self, name: str) -> set[str]:
        """Every node that depends on ``name``, directly or not."""
        children: dict[str, set[str]] = {n: set() for n in self.nodes}
        for node in self.nodes.values():
            for up in node.upstream:
                children[up].add(node.name)
        found: set[str] = set()
        stack = [name]
        while stack:
            for child in children[stack.pop()]:
                if child not in found:
                    found.add(child)
                    stack.append(child)
        return found
