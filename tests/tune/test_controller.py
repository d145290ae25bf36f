"""The TuneController core with scripted events: no cluster, no store, no threads.

The driver (``tune/driver.py``) turns what happens on the cluster into events for
``TuneController.handle``; most tests here call the step each event runs:
``next_actions`` (Tick: what to start), ``on_result`` (Reported: returns what to
stop or pause), ``on_complete`` (Completed), ``on_error`` (Failed).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from airflowless import tune
from airflowless.tune.controller import (
    Completed,
    Failed,
    Reported,
    Start,
    Stop,
    StopRequested,
    Tick,
    TuneController,
)
from airflowless.tune.schedulers.base import Decision, TrialScheduler, TrialView
from airflowless.tune.search.searcher import (
    FINISHED,
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Searcher,
)
from airflowless.tune.stoppers import as_stoppers
from airflowless.tune.trial import TrialStatus

RUNNING, PENDING = TrialStatus.RUNNING, TrialStatus.PENDING
TERMINATED, ERRORED, PAUSED = TrialStatus.TERMINATED, TrialStatus.ERRORED, TrialStatus.PAUSED


class ListSearcher(Searcher):
    """Suggests the given configs in order and remembers what it was told."""

    def __init__(self, configs: list[dict[str, Any]]) -> None:
        self.configs = configs
        self.given = 0
        self.results: list[tuple[str, int]] = []
        self.completed: list[tuple[str, bool]] = []

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.given >= len(self.configs):
            return FINISHED
        self.given += 1
        return dict(self.configs[self.given - 1])

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.results.append((trial_id, result["training_iteration"]))

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self.completed.append((trial_id, error))

    def get_state(self) -> dict[str, Any]:
        return {"given": self.given}

    def set_state(self, state: dict[str, Any]) -> None:
        self.given = state["given"]


class ScriptedScheduler(TrialScheduler):
    """Stops trial T when it reports iteration ``stop_at[T]``; records every call."""

    def __init__(self, stop_at: dict[str, int] | None = None) -> None:
        self.stop_at = stop_at or {}
        self.calls: list[tuple[str, str]] = []

    def on_trial_add(self, trial: TrialView) -> None:
        self.calls.append(("add", trial.trial_id))

    def on_trial_result(self, trial: TrialView, result: dict[str, Any]) -> Decision:
        self.calls.append(("result", trial.trial_id))
        return Decision.STOP if self.stop_at.get(trial.trial_id) == trial.iteration else Decision.CONTINUE

    def on_trial_complete(self, trial: TrialView, result: dict[str, Any] | None) -> None:
        self.calls.append(("complete", trial.trial_id))

    def on_trial_remove(self, trial: TrialView) -> None:
        self.calls.append(("remove", trial.trial_id))


def controller(n: int = 4, *, max_concurrent: int = 2, max_failures: int = 0, scheduler: Any = None,
               stoppers: Any = ()) -> TuneController:
    return TuneController(searcher=ListSearcher([{"x": i} for i in range(n)]), scheduler=scheduler,
                          stoppers=stoppers, max_concurrent=max_concurrent, max_failures=max_failures)


def report(ctrl: TuneController, trial_id: str, iteration: int, checkpoint: str | None = None,
           **metrics: Any) -> list[Stop]:
    return ctrl.on_result(trial_id, {"loss": 1.0 / iteration, **metrics, "training_iteration": iteration,
                                     "checkpoint_uri": checkpoint})


def started(actions: list[Start]) -> list[str]:
    return [a.trial.trial_id for a in actions]


def statuses(ctrl: TuneController) -> dict[str, TrialStatus]:
    return {tid: t.status for tid, t in ctrl.trials.items()}


def test_every_event_goes_through_handle_and_answers_with_actions() -> None:
    ctrl = controller(3, max_concurrent=2, max_failures=1)
    assert started(ctrl.handle(Tick())) == ["trial_00000", "trial_00001"]
    assert ctrl.handle(Reported("trial_00000", {"loss": 0.5, "training_iteration": 1})) == []
    assert ctrl.handle(Failed("trial_00000", "RuntimeError: boom")) == []  # one retry left: pending
    assert ctrl.trials["trial_00000"].status == PENDING
    assert started(ctrl.handle(Tick())) == ["trial_00000"]  # retried before new trials start
    assert ctrl.handle(Completed("trial_00001")) == []
    assert started(ctrl.handle(Tick())) == ["trial_00002"]
    assert [type(a) for a in ctrl.handle(StopRequested("trial_00002"))] == [Stop]
    assert ctrl.handle(StopRequested("no_such_trial")) == []
    stops = ctrl.handle(StopRequested())  # the whole experiment: what still runs is stopped (again)
    assert [(type(a), a.trial.trial_id) for a in stops] == [(Stop, "trial_00000"), (Stop, "trial_00002")]
    assert ctrl.stop_requested and ctrl.search_finished
    with pytest.raises(TypeError, match="not a Tune controller event"):
        ctrl.handle("stop")  # type: ignore[arg-type]


# -- starting trials ---------------------------------------------------------------------------

def test_max_concurrent_is_respected_as_trials_come_and_go() -> None:
    ctrl = controller(5, max_concurrent=2)
    first = ctrl.next_actions()
    assert started(first) == ["trial_00000", "trial_00001"]
    assert [a.trial.config for a in first] == [{"x": 0}, {"x": 1}]
    assert all(a.checkpoint is None and a.iteration == 0 for a in first)
    assert ctrl.next_actions() == []  # full
    report(ctrl, "trial_00000", 1)
    assert ctrl.next_actions() == []  # a report frees nothing
    ctrl.on_complete("trial_00000")
    assert started(ctrl.next_actions()) == ["trial_00002"]
    ctrl.on_complete("trial_00001")
    ctrl.on_complete("trial_00002")
    assert started(ctrl.next_actions()) == ["trial_00003", "trial_00004"]
    assert len(ctrl.running) == 2 and not ctrl.search_finished  # not asked again yet: no room
    ctrl.on_complete("trial_00003")
    assert ctrl.next_actions() == [] and ctrl.search_finished  # the searcher said FINISHED
    assert len(ctrl.trials) == 5


def test_done_once_the_search_finished_and_every_trial_ended() -> None:
    ctrl = controller(2, max_concurrent=4)
    assert not ctrl.done
    assert started(ctrl.next_actions()) == ["trial_00000", "trial_00001"]
    assert ctrl.search_finished and not ctrl.done  # nothing more to start, but trials run
    ctrl.on_complete("trial_00000")
    assert not ctrl.done
    ctrl.on_error("trial_00001", "ValueError: boom")
    assert ctrl.done
    assert statuses(ctrl) == {"trial_00000": TERMINATED, "trial_00001": ERRORED}


def test_a_searcher_with_nothing_to_suggest_right_now_is_asked_again_later() -> None:
    inner = BasicVariantGenerator()
    limited = ConcurrencyLimiter(inner, max_concurrent=1)
    limited.set_search_properties(None, None, {"x": tune.grid_search([1, 2, 3])}, 1, 0)
    ctrl = TuneController(searcher=limited, max_concurrent=4)
    order = []
    for _ in range(3):
        actions = ctrl.next_actions()
        assert len(actions) == len(ctrl.running) == 1  # the limiter, not max_concurrent, holds trials back
        assert ctrl.next_actions() == [] and not ctrl.search_finished  # "nothing right now"
        order.append(actions[0].trial.config["x"])
        ctrl.on_complete(actions[0].trial.trial_id)
    assert ctrl.next_actions() == [] and ctrl.done
    assert order == [1, 2, 3]


# -- results, scheduler decisions, stoppers ----------------------------------------------------

def test_results_reach_the_searcher_and_the_scheduler_in_order() -> None:
    scheduler = ScriptedScheduler()
    ctrl = controller(1, scheduler=scheduler)
    ctrl.next_actions()
    for it in (1, 2, 3):
        assert report(ctrl, "trial_00000", it) == []
    ctrl.on_complete("trial_00000")
    trial = ctrl.trials["trial_00000"]
    assert [r["training_iteration"] for r in trial.results] == [1, 2, 3] and trial.iteration == 3
    assert ctrl.searcher.results == [("trial_00000", 1), ("trial_00000", 2), ("trial_00000", 3)]  # type: ignore[attr-defined]
    assert ctrl.searcher.completed == [("trial_00000", False)]  # type: ignore[attr-defined]
    assert scheduler.calls == [("add", "trial_00000")] + [("result", "trial_00000")] * 3 + [
        ("complete", "trial_00000")]


def test_a_scheduler_stop_is_an_action_and_the_trial_ends_with_its_task() -> None:
    ctrl = controller(2, scheduler=ScriptedScheduler({"trial_00001": 2}))
    ctrl.next_actions()
    assert report(ctrl, "trial_00001", 1) == []
    actions = report(ctrl, "trial_00001", 2)
    assert [type(a) for a in actions] == [Stop] and actions[0].trial.trial_id == "trial_00001"
    trial = ctrl.trials["trial_00001"]
    assert trial.stopped_early and trial.status == RUNNING  # until the adapter says its task ended
    ctrl.on_complete("trial_00001")
    assert trial.status == TERMINATED
    assert report(ctrl, "trial_00001", 3) == []  # a late report of an ended trial is dropped
    assert trial.iteration == 2
    assert report(ctrl, "trial_00000", 2) == []  # the other trial goes on
    assert not ctrl.trials["trial_00000"].stopped_early


@pytest.mark.parametrize(
    ("stop", "stops_at"),
    [
        (tune.MaximumIterationStopper(max_iter=3), 3),
        ({"training_iteration": 4}, 4),                                     # RunConfig(stop={...})
        ({"score": 2.5}, 3),                                                # score = iteration - 0.5
        (lambda trial_id, result: result["training_iteration"] == 2, 2),    # RunConfig(stop=fn)
        (tune.TrialPlateauStopper(metric="flat", std=0.01, num_results=3, grace_period=3), 3),
        ([tune.MaximumIterationStopper(max_iter=5), {"training_iteration": 2}], 2),
    ],
    ids=["max-iter", "dict-iter", "dict-metric", "function", "plateau", "list"],
)
def test_stoppers_stop_trials(stop: Any, stops_at: int) -> None:
    ctrl = controller(1, stoppers=as_stoppers(stop))
    ctrl.next_actions()
    for it in range(1, 10):
        actions = report(ctrl, "trial_00000", it, score=it - 0.5, flat=1.0)
        if actions:
            break
    assert it == stops_at
    assert [a.trial.trial_id for a in actions] == ["trial_00000"]
    assert ctrl.trials["trial_00000"].stopped_early


def test_a_stopper_overrides_a_scheduler_that_continues() -> None:
    ctrl = controller(1, scheduler=ScriptedScheduler(), stoppers=as_stoppers({"loss": 0.0}))
    ctrl.next_actions()
    assert report(ctrl, "trial_00000", 1) != []  # loss 1.0 >= 0.0


# -- pausing and resuming (promotion ASHA) -----------------------------------------------------

def kinds(actions: list[Any]) -> list[tuple[str, str]]:
    return [(type(a).__name__, a.trial.trial_id) for a in actions]


def test_promotion_asha_pauses_resumes_and_ends_paused_trials_when_nothing_else_can_run() -> None:
    """Losses 1, 5, 6, 7 (constant per trial), reduction 2, max_t 4: effective rungs at 1 and 2."""
    scheduler = tune.ASHAScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=4,
                                   promotion=True)
    ctrl = TuneController(searcher=ListSearcher([{"x": x} for x in (1, 5, 6, 7)]), scheduler=scheduler,
                          max_concurrent=1)
    t0, t1, t2, t3 = (f"trial_0000{i}" for i in range(4))

    def step(trial_id: str, iteration: int) -> list[Any]:
        return ctrl.on_result(trial_id, {"loss": ctrl.trials[trial_id].config["x"], "training_iteration": iteration})

    assert kinds(ctrl.next_actions()) == [("Start", t0)]
    assert kinds(step(t0, 1)) == [("Pause", t0)]          # alone at rung 1: top floor(1/2) = none
    assert ctrl.trials[t0].status == PAUSED
    assert kinds(ctrl.next_actions()) == [("Start", t1)]  # its slot is free at once
    assert ctrl.resumable == {}                           # but it cannot go on before its run stopped
    ctrl.on_paused(t0, in_memory=True)                    # the adapter: its run waits in memory
    assert kinds(step(t1, 1)) == [("Pause", t1)]          # top 1 of 2 at rung 1 is t0 ...
    assert kinds(ctrl.next_actions()) == [("Resume", t0)]  # ... so t0 goes on before any new trial
    ctrl.on_paused(t1, in_memory=True)
    assert kinds(step(t0, 2)) == [("Pause", t0)]          # alone at rung 2
    assert kinds(ctrl.next_actions()) == [("Start", t2)]
    ctrl.on_paused(t0, in_memory=True)
    assert kinds(step(t2, 1)) == [("Pause", t2)]          # top 1 of 3 is t0
    assert kinds(ctrl.next_actions()) == [("Start", t3)]
    ctrl.on_paused(t2, in_memory=True)
    assert kinds(step(t3, 1)) == [("Pause", t3)]          # top 2 of 4: t0 (sent on already) and t1
    assert kinds(ctrl.next_actions()) == [("Resume", t1)]
    ctrl.on_paused(t3, in_memory=True)
    assert kinds(step(t1, 2)) == [("Pause", t1)]          # rung 2: top 1 of 2 is t0
    assert kinds(ctrl.next_actions()) == [("Resume", t0)]
    ctrl.on_paused(t1, in_memory=True)
    assert step(t0, 3) == []
    assert kinds(step(t0, 4)) == [("Stop", t0)]           # max_t
    ctrl.on_complete(t0)
    assert not ctrl.done
    # nothing can start now: the ceil share of each rung is already on, so the paused ones end
    assert sorted(kinds(ctrl.next_actions())) == [("Stop", t1), ("Stop", t2), ("Stop", t3)]
    assert ctrl.search_finished and ctrl.done and not ctrl.resumable
    assert {tid: (t.status, t.stopped_early) for tid, t in ctrl.trials.items()} == {
        t0: (TERMINATED, True), t1: (TERMINATED, True), t2: (TERMINATED, True), t3: (TERMINATED, True)}
    assert [ctrl.trials[t].iteration for t in (t0, t1, t2, t3)] == [4, 2, 1, 1]


def test_a_paused_trial_whose_run_is_gone_restarts_from_its_checkpoint() -> None:
    scheduler = tune.ASHAScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=8,
                                   promotion=True)
    ctrl = TuneController(searcher=ListSearcher([{"x": 1}, {"x": 5}]), scheduler=scheduler, max_concurrent=1)
    t0, t1 = "trial_00000", "trial_00001"
    ctrl.next_actions()
    assert kinds(report(ctrl, t0, 1, checkpoint="/ckpt/0/1", loss=1.0)) == [("Pause", t0)]
    assert kinds(ctrl.next_actions()) == [("Start", t1)]
    ctrl.on_paused(t0, in_memory=False)  # e.g. a Trainer trial: its run stopped
    assert kinds(report(ctrl, t1, 1, loss=5.0)) == [("Pause", t1)]
    (action,) = ctrl.next_actions()
    assert isinstance(action, Start) and (action.trial.trial_id, action.checkpoint, action.iteration) == (
        t0, "/ckpt/0/1", 1)
    # resumed in memory, but the run was not there (its worker left): from its checkpoint too
    ctrl.on_park_lost(t0)
    assert kinds(ctrl.next_actions()) == [("Start", t0)]


def test_state_round_trip_keeps_paused_trials_paused() -> None:
    scheduler = tune.ASHAScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=8,
                                   promotion=True)
    ctrl = TuneController(searcher=ListSearcher([{"x": 1}, {"x": 2}]), scheduler=scheduler, max_concurrent=1)
    ctrl.next_actions()
    report(ctrl, "trial_00000", 1, checkpoint="/ckpt/1", loss=1.0)
    ctrl.on_paused("trial_00000", in_memory=True)
    state = pickle.loads(pickle.dumps(ctrl.get_state()))
    again = TuneController(searcher=ListSearcher([{"x": 1}, {"x": 2}]), scheduler=scheduler, max_concurrent=1)
    again.set_state(state)
    assert again.trials["trial_00000"].status == PAUSED
    assert again.resumable == {"trial_00000": False}  # its run in memory is gone with the old driver


def test_pbt_style_pause_with_an_exploit_stops_the_run_and_restarts_from_the_donor() -> None:
    class Exploiting(TrialScheduler):
        def on_trial_result(self, trial: TrialView, result: dict[str, Any]) -> Decision:
            return Decision.PAUSE if trial.trial_id == "trial_00001" else Decision.CONTINUE

        def exploit_for(self, trial_id: str) -> tuple[dict[str, Any], str, int]:
            return {"x": 99}, "/ckpt/donor", 3

    ctrl = controller(2, scheduler=Exploiting())
    ctrl.next_actions()
    assert kinds(report(ctrl, "trial_00001", 1)) == [("Stop", "trial_00001")]
    ctrl.on_complete("trial_00001")
    (action,) = ctrl.next_actions()
    assert (action.trial.config, action.checkpoint, action.iteration) == ({"x": 99}, "/ckpt/donor", 3)


# -- failures ----------------------------------------------------------------------------------

def test_a_failed_trial_is_retried_from_its_checkpoint_up_to_max_failures_then_errored() -> None:
    scheduler = ScriptedScheduler()
    ctrl = controller(1, max_concurrent=1, max_failures=2, scheduler=scheduler)
    assert started(ctrl.next_actions()) == ["trial_00000"]
    trial = ctrl.trials["trial_00000"]
    report(ctrl, "trial_00000", 1)
    report(ctrl, "trial_00000", 2, checkpoint="/ckpt/2")
    report(ctrl, "trial_00000", 3)
    ctrl.on_error("trial_00000", "RuntimeError: first")
    assert (trial.status, trial.restarts, trial.error) == (PENDING, 1, None)
    retry = ctrl.next_actions()
    assert started(retry) == ["trial_00000"]
    assert (retry[0].checkpoint, retry[0].iteration) == ("/ckpt/2", 2)  # resumes after its checkpoint
    assert trial.status == RUNNING

    report(ctrl, "trial_00000", 4, checkpoint="/ckpt/4")
    ctrl.on_error("trial_00000", "RuntimeError: second")
    retry = ctrl.next_actions()
    assert (retry[0].checkpoint, retry[0].iteration, trial.restarts) == ("/ckpt/4", 4, 2)

    ctrl.on_error("trial_00000", "RuntimeError: third")
    assert (trial.status, trial.restarts, trial.error) == (ERRORED, 2, "RuntimeError: third")
    assert ctrl.next_actions() == [] and ctrl.done
    assert ctrl.searcher.completed == [("trial_00000", True)]  # type: ignore[attr-defined]
    assert scheduler.calls[-1] == ("remove", "trial_00000")


def test_without_a_checkpoint_a_retry_starts_from_scratch() -> None:
    ctrl = controller(1, max_failures=1)
    ctrl.next_actions()
    report(ctrl, "trial_00000", 1)
    ctrl.on_error("trial_00000", "boom")
    (retry,) = ctrl.next_actions()
    assert (retry.checkpoint, retry.iteration) == (None, 0)


def test_a_retried_trial_starts_before_new_ones_and_counts_against_max_concurrent() -> None:
    ctrl = controller(4, max_concurrent=2, max_failures=1)
    assert started(ctrl.next_actions()) == ["trial_00000", "trial_00001"]
    ctrl.on_error("trial_00001", "boom")
    assert started(ctrl.next_actions()) == ["trial_00001"]  # not trial_00002
    ctrl.on_complete("trial_00000")
    assert started(ctrl.next_actions()) == ["trial_00002"]


def test_max_failures_zero_errors_at_once() -> None:
    ctrl = controller(1, max_failures=0)
    ctrl.next_actions()
    ctrl.on_error("trial_00000", "KeyError: 'x'")
    assert ctrl.trials["trial_00000"].status == ERRORED
    assert ctrl.trials["trial_00000"].error == "KeyError: 'x'"
    ctrl.on_error("trial_00000", "again")  # a second report of the same failure changes nothing
    assert ctrl.trials["trial_00000"].error == "KeyError: 'x'"


# -- state -------------------------------------------------------------------------------------

def test_state_round_trip_restarts_running_trials_from_their_checkpoints() -> None:
    ctrl = controller(5, max_concurrent=3)
    ctrl.next_actions()  # trials 0, 1, 2
    report(ctrl, "trial_00000", 1)
    ctrl.on_complete("trial_00000")
    report(ctrl, "trial_00001", 1)
    report(ctrl, "trial_00001", 2, checkpoint="/ckpt/1/2")
    report(ctrl, "trial_00001", 3)
    ctrl.on_error("trial_00002", "boom")
    ctrl.next_actions()  # trial 3 takes the free slots; trial 4 too
    assert statuses(ctrl) == {"trial_00000": TERMINATED, "trial_00001": RUNNING, "trial_00002": ERRORED,
                              "trial_00003": RUNNING, "trial_00004": RUNNING}
    ctrl.on_complete("trial_00004")

    state = pickle.loads(pickle.dumps(ctrl.get_state()))  # as Tuner saves it (cloudpickle)
    scheduler = ScriptedScheduler()
    again = TuneController(searcher=ListSearcher([{"x": i} for i in range(5)]), scheduler=scheduler,
                           max_concurrent=3)
    again.set_state(state)
    assert statuses(again) == {"trial_00000": TERMINATED, "trial_00001": PENDING, "trial_00002": ERRORED,
                               "trial_00003": PENDING, "trial_00004": TERMINATED}
    assert [c for c in scheduler.calls if c[0] == "add"] == [("add", f"trial_0000{i}") for i in range(5)]
    assert again.searcher.given == 5  # type: ignore[attr-defined]
    assert again.trials["trial_00001"].results == ctrl.trials["trial_00001"].results
    assert again.trials["trial_00002"].error == "boom"

    actions = again.next_actions()
    assert started(actions) == ["trial_00001", "trial_00003"]  # finished ones are not started again
    assert [(a.checkpoint, a.iteration) for a in actions] == [("/ckpt/1/2", 2), (None, 0)]
    for action in actions:
        again.on_complete(action.trial.trial_id)
    assert again.done


def test_state_round_trip_continues_the_search_where_it_stopped() -> None:
    def make() -> TuneController:
        searcher = BasicVariantGenerator()
        searcher.set_search_properties(None, None, {"x": tune.uniform(0, 1)}, 6, None)  # unseeded
        return TuneController(searcher=searcher, max_concurrent=2)

    ctrl = make()
    ctrl.next_actions()
    ctrl.on_complete("trial_00000")
    ctrl.next_actions()
    state = pickle.loads(pickle.dumps(ctrl.get_state()))
    again = make()  # draws different configs of its own...
    again.set_state(state)  # ...but continues the saved ones
    configs = {tid: t.config for tid, t in again.trials.items()}
    while not again.done:
        for action in again.next_actions():
            configs[action.trial.trial_id] = action.trial.config
        for trial in again.running:
            again.on_complete(trial.trial_id)
    assert sorted(configs) == [f"trial_0000{i}" for i in range(6)]
    assert [configs[f"trial_0000{i}"] for i in range(6)] == ctrl.searcher.get_state()["configs"]
