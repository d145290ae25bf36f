"""The rules of a run (airflowless.dag.run_state), without a cluster: events in, actions out.

The same rules run on a real cluster in test_run.py, test_triggers.py, test_map.py and test_deadline.py;
here each is driven event by event, as the driver would, so a rule can be checked where a cluster could
not show it deterministically (a deadline's grace, the order of releases, a late start event).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflowless.dag.graph import Graph, Node, StageRef
from airflowless.dag.mapping import expand
from airflowless.dag.run_state import (
    Action,
    Cancel,
    Expand,
    Expanded,
    Failed,
    NotExpanded,
    Record,
    Retrying,
    RunState,
    Say,
    Started,
    Submit,
    Succeeded,
    Tick,
)
from airflowless.dag.stage import Stage, stage
from airflowless.dag.task import Outcome
from airflowless.errors import StageFailedError, StageSkipped

NOW = datetime(2026, 12, 4, tzinfo=timezone.utc)


@stage
def step(*inputs: Any) -> Any: ...


def _graph(*nodes: tuple[str, list[str]] | tuple[str, list[str], Stage]) -> Graph:
    """A graph of (name, names it reads[, stage]) in that order."""
    graph = Graph("p")
    for name, reads, *rest in nodes:
        graph.add(Node(name, rest[0] if rest else step, tuple(StageRef(r, graph.id) for r in reads), {}))
    return graph


def _state(graph: Graph, **kwargs: Any) -> RunState:
    return RunState(graph, graph.validate(), **kwargs)


def _ok(node: str, attempts: int = 1, value: Any = None) -> Succeeded:
    return Succeeded(node, Outcome(node, value, 100.0, 101.5, attempts, "tcp://w1", f"memory://{node}", "None"))


def _fail(node: str, why: str = "ValueError: broke") -> Failed:
    return Failed(node, StageFailedError(node, why, f"Traceback ...\n{why}"))


def _submitted(actions: list[Action]) -> list[tuple[str, tuple[str, ...]]]:
    return [(a.node, a.missing) for a in actions if isinstance(a, Submit)]


def _rows(actions: list[Action]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for action in actions:
        if isinstance(action, Record):
            rows.setdefault(action.node, {}).update(action.fields)
    return rows


def test_a_graph_is_submitted_whole_and_a_failure_skips_what_reads_it() -> None:
    state = _state(_graph(("load", []), ("fit", ["load"]), ("report", ["fit"]), ("other", [])))
    assert _submitted(state.start()) == [("load", ()), ("fit", ()), ("report", ()), ("other", ())]
    assert state.handle(_fail("load")) == []
    handed_on = StageFailedError("load", "ValueError: broke")  # Dask hands load's error to what reads it
    state.handle(Failed("fit", handed_on))
    state.handle(Failed("report", handed_on))
    state.handle(_ok("other"))
    assert state.pending == set()
    ending = state.settle(NOW)
    rows = _rows(ending.actions)
    assert ending.status == "failed"
    assert ending.error == "stage load failed: ValueError: broke"
    assert ending.failures == {"load": "Traceback ...\nValueError: broke"}
    assert rows["load"] == {"status": "failed", "finished_at": NOW, "error": "ValueError: broke",
                            "traceback": "Traceback ...\nValueError: broke"}
    assert rows["fit"] == rows["report"] == {"status": "skipped", "error": "skipped: an upstream stage failed"}
    assert "other" not in rows  # its success was recorded when it was told


def test_reused_stages_run_no_task_unless_a_stage_that_runs_reads_them() -> None:
    graph = _graph(("a", []), ("b", ["a"]), ("c", ["b"]))
    resumed = _state(graph, reused={"a", "b"})
    assert _submitted(resumed.start()) == [("b", ()), ("c", ())]  # b's output is read back for c
    assert resumed.handle(_ok("b")) == [Say("b", "reused an earlier output")]
    all_cached = _state(graph, reused={"a", "b", "c"})
    assert all_cached.start() == [] and all_cached.pending == set()
    assert all_cached.settle(NOW).status == "succeeded"


def test_attempts_are_counted_from_start_events_and_late_events_are_dropped() -> None:
    state = _state(_graph(("fit", [])))
    state.start()
    first = state.handle(Started("fit", "tcp://w1", at=50.0, now=0.0, log="logs/fit.1.log"))
    assert _rows(first)["fit"] == {"status": "running", "attempts": 1, "worker": "tcp://w1",
                                   "log_uri": "logs/fit.1.log",
                                   "started_at": datetime.fromtimestamp(50.0, timezone.utc)}
    # its worker died; Dask ran the task again, which counts from 1 again: it is the second attempt all the same
    again = _rows(state.handle(Started("fit", "tcp://w2", at=60.0, now=10.0)))["fit"]
    assert again["attempts"] == 2 and "started_at" not in again
    done = _rows(state.handle(_ok("fit", attempts=1)))["fit"]
    assert done["attempts"] == 2 and done["status"] == "succeeded" and done["duration_s"] == 1.5
    assert state.handle(Started("fit", "tcp://w3", at=70.0, now=20.0)) == []  # late: already ended
    assert state.settle(NOW).status == "succeeded"


def test_a_success_before_its_start_event_takes_its_start_from_the_task() -> None:
    state = _state(_graph(("quick", [])))
    state.start()
    row = _rows(state.handle(_ok("quick")))["quick"]
    assert row["started_at"] == datetime.fromtimestamp(100.0, timezone.utc) and row["attempts"] == 1


def test_a_blocked_attempt_is_given_up_after_its_timeout_and_a_grace_and_what_reads_it_is_cancelled() -> None:
    slow = step.options_with(timeout=10)
    long = step.options_with(timeout=100)
    state = _state(_graph(("slow", [], slow), ("after", ["slow"]), ("long", [], long), ("free", [])))
    state.start()
    state.handle(Started("slow", "w", at=0.0, now=0.0))
    state.handle(Started("long", "w", at=0.0, now=0.0))
    assert state.handle(Tick(now=14.9)) == []  # grace: at least 5 s
    assert state.handle(Tick(now=15.1)) == [Cancel(("slow", "after"))]
    assert state.pending == {"long", "free"}
    assert state.handle(Tick(now=109.0)) == []  # grace: a tenth of a long timeout
    assert state.handle(Tick(now=110.5)) == [Cancel(("long",))]
    state.handle(_ok("free"))
    ending = state.settle(NOW)
    rows = _rows(ending.actions)
    assert rows["slow"]["status"] == "failed" and "longer than its timeout of 10 s" in rows["slow"]["error"]
    assert "blocked outside Python code" in ending.failures["slow"]
    assert rows["after"] == {"status": "skipped", "error": "skipped: an upstream stage failed"}


def test_waiting_to_retry_is_not_running_past_the_timeout() -> None:
    flaky = step.options_with(timeout=10, retries=1)
    state = _state(_graph(("flaky", [], flaky)))
    state.start()
    state.handle(Started("flaky", "w", at=0.0, now=0.0))
    said = state.handle(Retrying("flaky", "OSError: reset", delay=30.0))
    assert said == [Record("flaky", {"error": "OSError: reset"}),
                    Say("flaky", "failed (OSError: reset); retrying in 30 s")]
    assert state.handle(Tick(now=40.0)) == []
    state.handle(Started("flaky", "w", at=40.0, now=40.0))  # the next attempt has a deadline of its own
    assert state.handle(Tick(now=56.0)) == [Cancel(("flaky",))]


def test_trigger_rules_decide_once_the_stages_read_have_ended() -> None:
    graph = _graph(("work", []), ("double", ["work"]),
                   ("release", ["work"], step.options_with(trigger="all_done")),
                   ("after_release", ["release"]),
                   ("alert", ["work"], step.options_with(trigger="one_failed")))
    failing = _state(graph)
    assert _submitted(failing.start()) == [("work", ()), ("double", ())]  # the rest wait for work's end
    failing.handle(_fail("work"))
    failing.handle(Failed("double", StageFailedError("work", "ValueError: broke")))
    assert _submitted(failing.handle(Tick(now=1.0))) == [("release", ("work",)), ("alert", ("work",))]
    assert _submitted(failing.handle(_ok("release")) + failing.handle(Tick(now=2.0))) == [("after_release", ())]
    failing.handle(_ok("alert"))
    failing.handle(_ok("after_release"))
    ending = failing.settle(NOW)
    assert ending.status == "failed" and list(ending.failures) == ["work"]
    assert _rows(ending.actions)["double"]["status"] == "skipped"

    succeeding = _state(graph)
    succeeding.start()
    succeeding.handle(_ok("work"))
    succeeding.handle(_ok("double"))
    actions = succeeding.handle(Tick(now=1.0))
    assert _submitted(actions) == [("release", ())]  # read as it is: nothing missing
    assert Say("alert", "skipped: no upstream stage failed (trigger one_failed)") in actions
    assert _rows(succeeding.settle(NOW).actions)["alert"]["status"] == "skipped"


def test_a_stage_that_skips_itself_skips_what_reads_it_but_not_a_clean_up_stage() -> None:
    graph = _graph(("check", []), ("use", ["check"]), ("tidy", ["check"], step.options_with(trigger="all_done")),
                   ("then", ["use"], step.options_with(trigger="all_done")))
    state = _state(graph)
    assert _submitted(state.start()) == [("check", ()), ("use", ())]
    state.handle(Failed("check", StageSkipped("check", "no new data")))
    state.handle(Failed("use", StageSkipped("check", "no new data")))
    assert _submitted(state.handle(Tick(now=1.0))) == [("tidy", ("check",)), ("then", ("use",))]
    state.handle(_ok("tidy"))
    state.handle(_ok("then"))
    ending = state.settle(NOW)
    rows = _rows(ending.actions)
    assert ending.status == "succeeded" and ending.error is None
    assert rows["check"]["status"] == "skipped" and rows["check"]["error"] == "skipped: no new data"
    assert rows["use"] == {"status": "skipped", "error": "skipped: an upstream stage skipped itself"}


def test_an_all_success_stage_after_a_clean_up_stage_is_kept_from_running_when_upstream_failed() -> None:
    graph = _graph(("work", []), ("tidy", ["work"], step.options_with(trigger="all_done")),
                   ("publish", ["work", "tidy"]))
    state = _state(graph)
    state.start()
    state.handle(_fail("work"))
    state.handle(Tick(now=1.0))
    state.handle(_ok("tidy"))
    actions = state.handle(Tick(now=2.0))
    assert actions == [Say("publish", "skipped: upstream stage 'work' failed")]
    assert state.pending == set()


def test_the_runs_timeout_stops_its_stages_and_the_clean_up_stages_run_next() -> None:
    graph = _graph(("work", []), ("more", ["work"]), ("tidy", ["work"], step.options_with(trigger="all_done")))
    state = _state(graph, timeout=5.0, now=0.0)
    state.start()
    state.handle(Started("work", "w", at=0.0, now=0.0))
    assert state.handle(Tick(now=4.0)) == []
    actions = state.handle(Tick(now=5.5))
    why = "cancelled: the run timed out after 5 s (@pipeline(timeout=...))"
    assert actions[0] == Cancel(("work", "more"), stop_code=True)
    assert Say("work", why) in actions and _submitted(actions) == [("tidy", ("work",))]
    state.handle(_ok("tidy"))
    ending = state.settle(NOW)
    rows = _rows(ending.actions)
    assert ending.status == "timed_out"
    assert ending.error == f"the run timed out after 5 s; stopped: stage work failed: {why}"
    assert rows["work"] == {"status": "cancelled", "finished_at": NOW, "error": why}
    assert rows["more"]["status"] == "skipped"  # it never started: it waited for work


def _mapped_graph(concurrency: int | None = None) -> Graph:
    graph = Graph("p")
    days = graph.add(Node("list_days", step, (), {}))
    score = step.options_with(concurrency=concurrency)
    scores = graph.add(Node("score", score, ("model",), {}, over=days))
    graph.add(Node("summarise", step, (scores,), {}))
    return graph


def _expanded(state: RunState, over: list[Any], reused: frozenset[str] = frozenset()) -> list[Action]:
    items, gather = expand(state.graph.nodes["score"], over, state.graph.id)
    return state.handle(Expanded("score", items, gather, reused))


def test_a_mapped_stage_is_expanded_once_its_list_is_known_and_gathered_when_its_items_ended() -> None:
    state = _state(_mapped_graph())
    assert _submitted(state.start()) == [("list_days", ())]
    state.handle(_ok("list_days", value=["d1", "d2", "d3"]))
    assert state.handle(Tick(now=1.0)) == [Expand("score")]
    assert state.handle(Tick(now=1.1)) == []  # asked once: the driver is making its items
    actions = _expanded(state, ["d1", "d2", "d3"], reused=frozenset({"score[1]"}))
    assert _submitted(actions) == [("score[1]", ()), ("score[0]", ()), ("score[2]", ())]
    assert state.order[:5] == ["list_days", "score[0]", "score[1]", "score[2]", "score"]
    for item in ("score[0]", "score[1]", "score[2]"):
        state.handle(_ok(item))
    assert _submitted(state.handle(Tick(now=2.0))) == [("score", ())]  # the gather
    row = _rows(state.handle(_ok("score")))["score"]
    assert row["output_summary"] == "3 items: 2 succeeded, 1 reused"
    assert _submitted(state.handle(Tick(now=3.0))) == [("summarise", ())]
    state.handle(_ok("summarise"))
    assert state.settle(NOW).status == "succeeded"


def test_a_mapped_stages_concurrency_bounds_its_items_in_flight() -> None:
    state = _state(_mapped_graph(concurrency=2))
    state.start()
    state.handle(_ok("list_days", value=[1, 2, 3, 4, 5]))
    state.handle(Tick(now=1.0))
    assert _submitted(_expanded(state, [1, 2, 3, 4, 5])) == [("score[0]", ()), ("score[1]", ())]
    state.handle(_ok("score[0]"))
    assert _submitted(state.handle(Tick(now=2.0))) == [("score[2]", ())]
    state.handle(_fail("score[1]"))
    state.handle(_ok("score[2]"))
    assert _submitted(state.handle(Tick(now=3.0))) == [("score[3]", ()), ("score[4]", ())]
    state.handle(_ok("score[3]"))
    state.handle(_ok("score[4]"))
    assert _submitted(state.handle(Tick(now=4.0))) == []  # an item failed: the gather fails, summarise is skipped
    ending = state.settle(NOW)
    assert ending.failures["score"] == "1 of 5 items failed (first: score[1])"
    assert _rows(ending.actions)["summarise"]["status"] == "skipped"


def test_a_map_over_an_empty_list_gathers_at_once_and_a_bad_list_fails_the_stage() -> None:
    empty = _state(_mapped_graph())
    empty.start()
    empty.handle(_ok("list_days", value=[]))
    empty.handle(Tick(now=1.0))
    assert _submitted(_expanded(empty, [])) == [("score", ())]

    bad = _state(_mapped_graph())
    bad.start()
    bad.handle(_ok("list_days", value={"not": "a list"}))
    bad.handle(Tick(now=1.0))
    assert bad.handle(NotExpanded("score", "step.map(...) maps over a list, but ... is a dict")) == [
        Say("summarise", "skipped: upstream stage 'score' failed")]
    ending = bad.settle(NOW)
    assert ending.error == "stage score failed: step.map(...) maps over a list, but ... is a dict"


def test_a_map_over_an_upstream_that_failed_is_not_expanded() -> None:
    state = _state(_mapped_graph())
    state.start()
    state.handle(_fail("list_days"))
    assert state.handle(Tick(now=1.0)) == [Say("score", "skipped: upstream stage 'list_days' failed"),
                                           Say("summarise", "skipped: upstream stage 'score' was skipped")]
