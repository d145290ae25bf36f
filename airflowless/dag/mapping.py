"""Mapped stages: ``stage.map(over, ...)``, one stage run per item of a list known when the run gets there.

When the stages a mapped node reads have ended, the driver *expands* it
(:func:`expand`): one node per item, ``score[0]``, ``score[1]``..., each a
stage run of its own in the record (its cache key is the item's value, so a
list that grows reuses the items it had), and the mapped node itself becomes
the node that gathers their outputs into the list its readers get. An item
that skipped itself (:class:`~airflowless.errors.Skip`) is ``None`` there.

>>> from airflowless.dag.graph import Node
>>> from airflowless.dag.stage import stage
>>> @stage
... def square(x: int) -> int:
...     return x * x
>>> items, gather = expand(Node("square", square, (), {}, over=[]), [1, 2], graph_id=0)
>>> [item.name for item in items], [item.args for item in items], gather.upstream
(['square[0]', 'square[1]'], [(1,), (2,)], ['square[0]', 'square[1]'])
"""

from __future__ import annotations

from typing import Any

from .graph import Node, StageRef
from .stage import Stage, StageOptions

__all__ = ["MapError", "check_width", "expand", "item_name"]


class MapError(ValueError):
    """What a mapped stage got cannot be mapped over (not a list, or too long)."""


def item_name(node: str, index: int) -> str:
    return f"{node}[{index}]"


def expand(node: Node, over: Any, graph_id: int) -> tuple[list[Node], Node]:
    """The item nodes of mapped ``node`` over the value ``over``, and the node gathering their outputs."""
    stage = node.stage
    if not isinstance(over, list | tuple):
        source = f"the output of stage {node.over.node!r}" if isinstance(node.over, StageRef) else "its argument"
        raise MapError(f"{stage.name}.map(...) maps over a list, but {source} is a {type(over).__name__} "
                       f"({over!r:.80}); return a list from it")
    check_width(stage, len(over))
    items = [Node(item_name(node.name, i), stage, (item, *node.args), dict(node.kwargs)) for i, item in enumerate(over)]
    gather = Node(node.name, Stage(_as_list, StageOptions(cache=stage.options.cache), stage.name),
                  ([StageRef(item.name, graph_id) for item in items],), {})
    return items, gather


def check_width(stage: Stage, items: int) -> None:
    """:class:`MapError` if ``items`` is more than ``stage.map`` may get (its ``max_width``)."""
    if items > stage.options.max_width:
        raise MapError(f"{stage.name}.map(...) got {items} items, more than its max_width of "
                       f"{stage.options.max_width}; raise @stage(max_width=...) or map over fewer")


def _as_list(outputs: list[Any]) -> list[Any]:
    return list(outputs)
