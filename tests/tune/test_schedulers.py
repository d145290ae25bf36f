"""Trial schedulers on scripted result sequences: no cluster, no controller.

Each script is a list of ``(trial, iteration, value)`` reports fed in order; the
scheduler's answers are compared with what the algorithm says it must answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle
import pytest

from airflowless import tune
from airflowless.errors import ConfigError
from airflowless.tune import Decision
from airflowless.tune.schedulers.base import TrialScheduler, TrialView

C, S = Decision.CONTINUE, Decision.STOP


def run_script(scheduler: TrialScheduler, script: list[tuple[str, int, float | None]], *,
               metric: str = "loss", time_attr: str = "training_iteration",
               added: set[str] | None = None) -> list[Decision]:
    """Feed the reports in order; return the decisions.

    A trial is added before its first report unless it is in ``added`` (the trials an
    earlier script on the same scheduler added; updated here).
    """
    added = set() if added is None else added
    decisions = []
    for trial_id, t, value in script:
        view = TrialView(trial_id, {}, t)
        if trial_id not in added:
            scheduler.on_trial_add(TrialView(trial_id, {}, 0))
            added.add(trial_id)
        result: dict[str, Any] = {time_attr: t}
        if value is not None:
            result[metric] = value
        decisions.append(scheduler.on_trial_result(view, result))
    return decisions


def asha(**kwargs: Any) -> tune.ASHAScheduler:
    options = {"metric": "loss", "mode": "min", "grace_period": 1, "reduction_factor": 2, "max_t": 8,
               **kwargs}
    return tune.ASHAScheduler(**options)


# -- FIFO --------------------------------------------------------------------------------------

def test_fifo_lets_every_trial_run_to_its_end() -> None:
    script = [(f"t{i}", it, float(i * 100 + it)) for i in range(4) for it in range(1, 20)]
    assert set(run_script(tune.FIFOScheduler(), script)) == {C}
    assert tune.FIFOScheduler().needs_results_promptly is False


# -- ASHA --------------------------------------------------------------------------------------

def test_asha_rungs_are_grace_period_times_powers_of_the_reduction_factor() -> None:
    assert [m for m, _ in asha()._brackets[0].rungs] == [8, 4, 2, 1]
    assert [m for m, _ in asha(max_t=100, reduction_factor=3)._brackets[0].rungs] == [81, 27, 9, 3, 1]
    assert [m for m, _ in asha(grace_period=5, max_t=100, reduction_factor=4)._brackets[0].rungs] == [80, 20, 5]


def test_asha_stops_a_bad_trial_at_the_first_rung_once_better_ones_are_recorded_there() -> None:
    script = [
        ("a", 1, 1.0),   # first at rung 1: nothing to compare with
        ("b", 1, 0.5),   # better than the cutoff (the median of [1.0])
        ("c", 1, 2.0),   # worse than the median of [1.0, 0.5]: stopped at once
        ("d", 1, 0.1),   # the best so far
    ]
    assert run_script(asha(), script) == [C, C, S, C]


def test_asha_does_not_stop_the_first_trials_to_reach_a_rung() -> None:
    # the worst trial arrives first: nobody is recorded yet, so it goes on
    assert run_script(asha(), [("bad", 1, 100.0), ("good", 1, 0.1)]) == [C, C]


def test_asha_compares_at_each_rung_once_and_not_between_rungs() -> None:
    scheduler = asha()
    script = [
        ("a", 1, 1.0), ("b", 1, 0.9),           # rung 1: both go on
        ("a", 2, 0.8), ("b", 2, 0.95),          # rung 2: b is worse than a's 0.8 -> stopped
        ("a", 3, 5.0),                          # between rungs: never compared
        ("a", 4, 0.7),                          # rung 4: alone -> goes on
    ]
    assert run_script(scheduler, script) == [C, C, C, S, C, C]
    rungs = dict(scheduler._brackets[0].rungs)
    assert rungs[1] == {"a": -1.0, "b": -0.9}  # scores kept as "higher is better"
    assert rungs[2] == {"a": -0.8, "b": -0.95}
    assert rungs[4] == {"a": -0.7}


def test_asha_keeps_the_top_fraction_of_a_rung() -> None:
    # reduction_factor 4: a newcomer must be in the top quarter of the rung to go on
    scheduler = asha(reduction_factor=4, max_t=64)
    script = [(f"t{i}", 1, float(i)) for i in range(8)]  # each one worse than all before it
    assert run_script(scheduler, script) == [C] + [S] * 7
    improving = [(f"u{i}", 1, -float(i)) for i in range(5)]  # each one better than all before it
    assert set(run_script(scheduler, improving)) == {C}
    # rung 1 now holds the losses 0..7 and 0..-4: the top quarter of those 13 is -1 or better
    assert run_script(scheduler, [("m1", 1, -0.5)]) == [S]
    assert run_script(scheduler, [("m2", 1, -1.0)]) == [C]


def test_asha_stops_every_trial_at_max_t() -> None:
    script = [("a", t, 1.0 / t) for t in range(1, 9)]
    decisions = run_script(asha(), script)
    assert decisions == [C] * 7 + [S]
    assert run_script(asha(), [("z", 8, None)]) == [S]  # even without the metric


def test_asha_mode_max_mirrors_mode_min() -> None:
    script = [("a", 1, 1.0), ("b", 1, 0.5), ("c", 1, 2.0), ("d", 1, 0.1)]
    mirrored = [(t, it, -v) for t, it, v in script]
    by_max = run_script(asha(metric="acc", mode="max"), mirrored, metric="acc")
    assert by_max == run_script(asha(), script) == [C, C, S, C]


def test_asha_uses_its_time_attr() -> None:
    scheduler = asha(time_attr="epoch")
    script = [("a", 1, 1.0), ("b", 1, 0.5), ("c", 1, 2.0), ("c", 8, 0.0)]
    assert run_script(scheduler, script, time_attr="epoch") == [C, C, S, S]


def test_asha_continues_without_the_metric() -> None:
    assert run_script(asha(), [("a", 1, 1.0), ("b", 1, 0.5), ("c", 1, None), ("c", 2, None)]) == [C, C, C, C]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"grace_period": 0}, "0 < grace_period <= max_t"), ({"grace_period": 10, "max_t": 5}, "grace_period <= max_t"),
     ({"reduction_factor": 1}, "reduction_factor > 1"), ({"brackets": 0}, "brackets >= 1")],
)
def test_asha_rejects_bad_settings(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        asha(**options)


# -- ASHA, promotion rule ----------------------------------------------------------------------

P = Decision.PAUSE


def resume(scheduler: TrialScheduler, paused: list[str], idle: bool = False) -> str | None:
    return scheduler.choose_trial_to_resume([TrialView(t, {}, 0) for t in paused], idle=idle)


def test_promotion_asha_goes_on_only_within_the_top_floor_share_of_the_rung() -> None:
    scheduler = asha(promotion=True)
    script = [
        ("a", 1, 1.0),   # alone: the top floor(1/2) = 0 trials -> waits
        ("b", 1, 0.5),   # top 1 of 2 -> goes on
        ("c", 1, 2.0),   # top 1 of 3 is b -> waits
        ("d", 1, 0.1),   # top 2 of 4: d, b -> goes on
        ("e", 1, 0.7),   # top 2 of 5: d, b -> waits
    ]
    assert run_script(scheduler, script) == [P, C, P, C, P]
    assert resume(scheduler, ["a", "c", "e"]) is None  # nobody paused is in the top 2 yet
    assert run_script(scheduler, [("f", 1, 3.0)]) == [P]  # top 3 of 6 now: d, b, e
    assert resume(scheduler, ["a", "c", "e", "f"]) == "e"
    assert resume(scheduler, ["a", "c", "f"]) is None  # e was sent on once; nobody else is in the top 3


def test_promotion_asha_resumes_from_the_highest_rung_first_and_judges_again_there() -> None:
    scheduler = asha(promotion=True)
    added: set[str] = set()
    assert run_script(scheduler, [("a", 1, 1.0), ("b", 1, 0.5)], added=added) == [P, C]
    assert run_script(scheduler, [("b", 2, 0.5)], added=added) == [P]  # alone at rung 2
    assert run_script(scheduler, [("c", 1, 0.4), ("d", 1, 0.3)], added=added) == [C, C]  # top 2 of 4
    assert run_script(scheduler, [("c", 2, 0.4)], added=added) == [C]  # top 1 of rung 2 (b: 0.5)
    assert run_script(scheduler, [("d", 2, 0.3)], added=added) == [C]  # top 1 of 3... d is best
    assert run_script(scheduler, [("e", 1, 0.2), ("f", 1, 0.25)], added=added) == [C, C]  # top 3 of 6
    # rung 2 holds b 0.5, c 0.4, d 0.3 (floor(3/2) = 1: d, already on); rung 1's top 3 are e, f, d
    assert resume(scheduler, ["a", "b"]) is None
    assert run_script(scheduler, [("e", 2, 0.2)], added=added) == [C]  # top 2 of rung 2: e, d
    assert resume(scheduler, ["a", "b"]) is None  # b is third of four at rung 2


def test_promotion_asha_when_idle_lets_the_top_ceil_share_go_on_so_the_best_reaches_max_t() -> None:
    scheduler = asha(promotion=True)
    assert run_script(scheduler, [("a", 1, 1.0)]) == [P]
    assert resume(scheduler, ["a"]) is None
    assert resume(scheduler, ["a"], idle=True) == "a"  # ceil(1/2) = 1
    added = {"a"}
    assert run_script(scheduler, [("a", 2, 0.9)], added=added) == [P]
    assert resume(scheduler, ["a"], idle=True) == "a"
    assert run_script(scheduler, [("a", 4, 0.8), ("a", 8, 0.7)], added=added) == [P, S]  # max_t ends it
    assert resume(scheduler, [], idle=True) is None


def test_promotion_asha_keeps_to_brackets_and_stops_at_max_t() -> None:
    scheduler = tune.AsyncHyperBandScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2,
                                             max_t=8, brackets=2, promotion=True)
    added: set[str] = set()
    # x0, y0 -> bracket 0 (rungs 1, 2, 4); x1, y1 -> bracket 1 (rungs 2, 4)
    assert run_script(scheduler, [("x0", 1, 1.0), ("x1", 1, 1.0), ("y0", 1, 0.5), ("y1", 1, 0.5)],
                      added=added) == [P, C, C, C]
    assert resume(scheduler, ["x0"]) is None
    assert run_script(scheduler, [("x1", 2, 1.0), ("y1", 2, 0.5)], added=added) == [P, C]
    assert resume(scheduler, ["x0", "x1"]) is None
    assert run_script(scheduler, [("y1", 8, 0.1)], added=added) == [S]


def test_the_stopping_rule_never_pauses_and_never_resumes() -> None:
    scheduler = asha()
    decisions = run_script(scheduler, [(f"t{i}", 1, float(10 - i)) for i in range(6)])
    assert P not in decisions
    assert resume(scheduler, [f"t{i}" for i in range(6)], idle=True) is None


# -- async HyperBand ---------------------------------------------------------------------------

def test_hyperband_brackets_start_at_later_rungs() -> None:
    scheduler = tune.AsyncHyperBandScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=8)
    assert [[m for m, _ in b.rungs] for b in scheduler._brackets] == [[8, 4, 2, 1], [8, 4, 2], [8, 4]]
    assert tune.HyperBandScheduler is tune.AsyncHyperBandScheduler


def test_hyperband_assigns_trials_round_robin_and_cuts_only_within_a_bracket() -> None:
    scheduler = tune.AsyncHyperBandScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2,
                                             max_t=8, brackets=3)
    good = [(f"g{i}", 1, 0.1) for i in range(3)]       # g0 -> bracket 0, g1 -> 1, g2 -> 2
    bad = [(f"b{i}", 1, 9.0) for i in range(3)]        # b0 -> bracket 0, b1 -> 1, b2 -> 2
    added: set[str] = set()
    assert run_script(scheduler, good + bad, added=added) == [C, C, C, S, C, C]  # only bracket 0 has rung 1
    later = [("g1", 2, 0.1), ("b1", 2, 9.0),            # bracket 1's first rung is 2
             ("g2", 4, 0.1), ("b2", 4, 9.0)]            # bracket 2's first rung is 4
    assert run_script(scheduler, later, added=added) == [C, S, C, S]
    assert scheduler._assigned == {"g0": 0, "g1": 1, "g2": 2, "b0": 0, "b1": 1, "b2": 2}


def test_hyperband_keeps_a_trials_bracket_when_it_is_added_again() -> None:
    # Tuner.restore adds every trial of the saved state again to the saved scheduler
    scheduler = tune.AsyncHyperBandScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2,
                                             max_t=8, brackets=3)
    for i in range(5):
        scheduler.on_trial_add(TrialView(f"t{i}", {}, 0))
    first = dict(scheduler._assigned)
    for i in range(6):
        scheduler.on_trial_add(TrialView(f"t{i}", {}, 0))
    assert first == {"t0": 0, "t1": 1, "t2": 2, "t3": 0, "t4": 1}
    assert scheduler._assigned == {**first, "t5": 2}


# -- median stopping ---------------------------------------------------------------------------

def median(**kwargs: Any) -> tune.MedianStoppingRule:
    return tune.MedianStoppingRule(**{"metric": "loss", "mode": "min", "grace_period": 1,
                                      "min_samples_required": 2, **kwargs})


def test_median_rule_stops_a_trial_worse_than_the_median_of_running_means() -> None:
    script = [
        ("a", 1, 1.0), ("a", 2, 1.0),
        ("b", 1, 3.0), ("b", 2, 1.0),
        ("c", 1, 5.0),   # others' running means at t=1: a 1.0, b 3.0 -> median 2.0; 5.0 is worse
        ("d", 1, 1.5),   # better than the median 2.0... of a, b, c: median of (1, 3, 5) is 3 -> goes on
        ("d", 2, 2.5),   # at t=2: means a 1.0, b 2.0, c 5.0 -> median 2.0; d's best (1.5) is better
    ]
    assert run_script(median(), script) == [C, C, C, C, S, C, C]


def test_median_rule_waits_for_enough_other_trials_and_the_grace_period() -> None:
    assert run_script(median(), [("a", 1, 1.0), ("b", 1, 50.0)]) == [C, C]  # one other trial only
    late = median(grace_period=3)
    script = [("a", 1, 1.0), ("b", 1, 1.0), ("c", 1, 9.0), ("c", 2, 9.0), ("c", 3, 9.0)]
    assert run_script(late, script) == [C, C, C, C, S]


def test_median_rule_judges_by_the_trials_best_result() -> None:
    script = [("a", 1, 2.0), ("b", 1, 2.0), ("c", 1, 1.0), ("c", 2, 50.0)]  # c's best (1.0) is good
    assert run_script(median(), script) == [C, C, C, C]


# -- every scheduler ---------------------------------------------------------------------------

SCHEDULERS: dict[str, Callable[[], TrialScheduler]] = {
    "fifo": tune.FIFOScheduler,
    "asha": lambda: tune.ASHAScheduler(grace_period=1, reduction_factor=2, max_t=100),
    "hyperband": lambda: tune.HyperBandScheduler(grace_period=1, reduction_factor=2, max_t=100),
    "median": lambda: tune.MedianStoppingRule(grace_period=1, min_samples_required=2),
}

MIXED = [(f"t{i}", it, abs(i - 3) + 1.0 / it) for it in range(1, 13) for i in range(6)]


@pytest.fixture(params=sorted(SCHEDULERS))
def make(request: pytest.FixtureRequest) -> Callable[[], TrialScheduler]:
    return SCHEDULERS[request.param]


def configured(make: Callable[[], TrialScheduler]) -> TrialScheduler:
    scheduler = make()
    scheduler.set_search_properties("loss", "min")  # as Tuner.fit does from TuneConfig
    return scheduler


def test_conformance_takes_metric_and_mode_from_the_tune_config(make: Callable[[], TrialScheduler]) -> None:
    scheduler = configured(make)
    assert (scheduler.metric, scheduler.mode) == ("loss", "min")
    own = make()
    own.metric, own.mode = "acc", "max"
    own.set_search_properties("loss", "min")
    assert (own.metric, own.mode) == ("acc", "max")  # its own settings win


def test_conformance_answers_every_result_with_a_decision(make: Callable[[], TrialScheduler]) -> None:
    decisions = run_script(configured(make), MIXED)
    assert len(decisions) == len(MIXED)
    assert all(isinstance(d, Decision) for d in decisions)
    if make is not tune.FIFOScheduler:
        assert S in decisions  # trials 0 and 5 are far worse than trial 3
        assert {d for d, (trial, _, _) in zip(decisions, MIXED, strict=True) if trial == "t3"} == {C}  # the best


def test_conformance_is_deterministic_and_picklable(make: Callable[[], TrialScheduler]) -> None:
    first = configured(make)
    head, tail = MIXED[:20], MIXED[20:]
    seen = {trial for trial, _, _ in head}
    run_script(first, head)
    copy = cloudpickle.loads(cloudpickle.dumps(first))  # a scheduler travels inside the experiment state
    fresh = configured(make)
    run_script(fresh, head)
    assert (run_script(first, tail, added=set(seen)) == run_script(copy, tail, added=set(seen))
            == run_script(fresh, tail, added=set(seen)))


def test_conformance_a_lone_trial_runs_on(make: Callable[[], TrialScheduler]) -> None:
    decisions = run_script(configured(make), [("solo", it, 10.0 / it) for it in range(1, 30)])
    assert decisions == [C] * 29


def test_conformance_results_without_the_metric_continue(make: Callable[[], TrialScheduler]) -> None:
    scheduler = configured(make)
    added: set[str] = set()
    run_script(scheduler, MIXED[:18], added=added)
    assert set(run_script(scheduler, [(f"t{i}", 5, None) for i in range(6)], added=added)) == {C}


def test_conformance_end_of_trial_hooks(make: Callable[[], TrialScheduler]) -> None:
    scheduler = configured(make)
    run_script(scheduler, MIXED[:12])
    assert scheduler.on_trial_complete(TrialView("t3", {}, 2), {"loss": 1.0}) is None
    assert scheduler.on_trial_remove(TrialView("t0", {}, 2)) is None
    assert scheduler.needs_results_promptly is (make is not tune.FIFOScheduler)
