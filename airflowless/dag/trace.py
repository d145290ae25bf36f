"""Tracing: running a pipeline function so that stage calls record graph nodes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import PipelineDefinitionError
from .graph import Graph, Node, StageRef
from .mapping import MapError, check_width
from .stage import Stage, _tracing, current_trace

__all__ = ["Trace", "current_trace", "tracing"]


class Trace:
    """Collects the stage calls of one pipeline function call into a :class:`Graph`."""

    def __init__(self, pipeline: str) -> None:
        self.graph = Graph(pipeline)

    def add(self, stage: Stage, args: tuple[Any, ...], kwargs: dict[str, Any]) -> StageRef:
        try:
            stage.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise PipelineDefinitionError(
                f"stage {stage.name!r} is called with arguments that do not fit its signature "
                f"{stage.name}{stage.signature}: {exc}"
            ) from None
        name = self.graph.unique_name(stage.name)
        return self.graph.add(Node(name, stage, tuple(args), dict(kwargs)))

    def add_mapped(self, stage: Stage, over: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> StageRef:
        """A node standing for ``stage(item, *args, **kwargs)`` for each item of ``over``."""
        if not isinstance(over, StageRef | list | tuple):
            raise PipelineDefinitionError(
                f"{stage.name}.map(...) maps over a list, or the output of a stage that returns one; "
                f"got {type(over).__name__} {over!r:.80}")
        if isinstance(over, list | tuple):
            try:
                check_width(stage, len(over))
            except MapError as exc:
                raise PipelineDefinitionError(str(exc)) from None
        try:
            stage.signature.bind(None, *args, **kwargs)  # the item goes first
        except TypeError as exc:
            raise PipelineDefinitionError(
                f"{stage.name}.map(...) calls {stage.name}{stage.signature} with each item first, then the "
                f"other arguments given; they do not fit: {exc}") from None
        name = self.graph.unique_name(stage.name)
        return self.graph.add(Node(name, stage, tuple(args), dict(kwargs), over=over))


@contextlib.contextmanager
def tracing(pipeline: str) -> Iterator[Trace]:
    trace = Trace(pipeline)
    token = _tracing.set(trace)
    try:
        yield trace
    finally:
        _tracing.reset(token)
