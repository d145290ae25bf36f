"""Tracing: running a pipeline function so that stage calls record graph nodes."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import PipelineDefinitionError
from .graph import Graph, Node, StageRef

if TYPE_CHECKING:
    from .stage import Stage

__all__ = ["Trace", "current_trace", "tracing"]

_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("airflowless_trace", default=None)


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


def current_trace() -> Trace | None:
    return _current.get()


@contextlib.contextmanager
def tracing(pipeline: str) -> Iterator[Trace]:
    trace = Trace(pipeline)
    token = _current.set(trace)
    try:
        yield trace
    finally:
        _current.reset(token)
