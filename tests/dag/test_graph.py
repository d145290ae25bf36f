"""Tracing and validation: no cluster needed."""

from __future__ import annotations

import pytest

from airflowless import pipeline, stage
from airflowless.dag.cache import cache_keys
from airflowless.dag.graph import Graph, Node, StageRef
from airflowless.errors import ParameterError, PipelineDefinitionError


@stage
def load(path: str) -> str:
    return path.upper()


@stage
def features(raw: str, scale: int = 1) -> str:
    return raw * scale


@stage
def join(left: str, right: str) -> str:
    return left + right


@pipeline
def wired(path: str = "a", scale: int = 2):
    raw = load(path)
    return join(features(raw, scale=scale), features(raw))


def test_stage_outside_a_pipeline_is_a_plain_call() -> None:
    assert load("x") == "X"


def test_tracing_records_one_node_per_call_with_unique_names() -> None:
    graph = wired.graph()
    assert list(graph.nodes) == ["load", "features", "features-2", "join"]
    assert graph.nodes["join"].upstream == ["features", "features-2"]
    assert graph.validate() == ["load", "features", "features-2", "join"]
    assert graph.downstream("load") == {"features", "features-2", "join"}
    assert isinstance(graph.result, StageRef) and graph.result.node == "join"


def test_cache_keys_follow_code_inputs_and_upstream() -> None:
    base = cache_keys(wired.graph(), ["load", "features", "features-2", "join"])
    same = cache_keys(wired.graph(), ["load", "features", "features-2", "join"])
    assert base == same
    other_scale = cache_keys(wired.graph(scale=3), ["load", "features", "features-2", "join"])
    assert other_scale["load"] == base["load"]
    assert other_scale["features"] != base["features"]
    assert other_scale["features-2"] == base["features-2"]
    assert other_scale["join"] != base["join"]  # a changed upstream invalidates downstream
    other_path = cache_keys(wired.graph(path="b"), ["load", "features", "features-2", "join"])
    assert all(other_path[n] != base[n] for n in base)


def test_a_new_version_changes_the_key() -> None:
    graph = wired.graph()
    order = graph.validate()
    bumped = Graph("wired")
    for name in order:
        node = graph.nodes[name]
        new_stage = node.stage.options_with(version="2") if name == "load" else node.stage
        bumped.nodes[name] = Node(name, new_stage, node.args, node.kwargs)
    assert cache_keys(bumped, order)["load"] != cache_keys(graph, order)["load"]


def test_cycle_is_one_clear_error() -> None:
    graph = Graph("loop")
    a = StageRef("a", graph.id)
    b = StageRef("b", graph.id)
    graph.nodes["a"] = Node("a", load, (b,), {})
    graph.nodes["b"] = Node("b", load, (a,), {})
    with pytest.raises(PipelineDefinitionError, match=r"cycle: a -> b -> a"):
        graph.validate()


def test_reference_to_another_pipeline_is_named() -> None:
    outside = wired.graph().result

    @pipeline
    def borrowing():
        return join(outside, load("x"))

    with pytest.raises(PipelineDefinitionError, match=r"stage 'join'.*'join'.*not a stage of this pipeline"):
        borrowing.graph()


def test_missing_and_unknown_parameters() -> None:
    @pipeline
    def needs(path: str, n: int = 1):
        return load(path)

    with pytest.raises(ParameterError, match=r"needs parameter\(s\) \['path'\]"):
        needs.graph()
    with pytest.raises(ParameterError, match=r"no parameter\(s\) \['nope'\]"):
        needs.graph(path="x", nope=1)


def test_bad_stage_call_and_branching_on_outputs() -> None:
    @pipeline
    def bad_call():
        return load("a", "b")

    with pytest.raises(PipelineDefinitionError, match=r"stage 'load' is called with arguments"):
        bad_call.graph()

    @pipeline
    def branching():
        raw = load("a")
        if raw:
            return raw
        return None

    with pytest.raises(PipelineDefinitionError, match=r"only known when the pipeline runs"):
        branching.graph()

    @pipeline
    def empty():
        return 1

    with pytest.raises(PipelineDefinitionError, match="calls no stage"):
        empty.graph()
