"""Searchers driven by hand (suggest, report, complete), as the controller drives them; no cluster.

OptunaSearch translates the space to Optuna distributions, learns from results,
and saves and restores its study; ConcurrencyLimiter caps unfinished trials.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import optuna
import pytest

from airflowless import tune
from airflowless.errors import ConfigError
from airflowless.tune.search.optuna import OptunaSearch
from airflowless.tune.search.searcher import (
    FINISHED,
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Searcher,
)

QUADRATIC = {"x": tune.uniform(-10, 10), "y": tune.uniform(-10, 10)}


def quadratic(config: dict[str, Any]) -> float:
    return (config["x"] - 3) ** 2 + (config["y"] + 1) ** 2


def prepared(searcher: Searcher, space: dict[str, Any], num_samples: int, seed: int | None = 0,
             metric: str = "loss", mode: str = "min") -> Searcher:
    searcher.set_search_properties(metric, mode, space, num_samples, seed)  # as Tuner.fit does
    return searcher


def search(searcher: Searcher, objective: Callable[[dict[str, Any]], float], limit: int = 1000,
           start: int = 0) -> list[tuple[dict[str, Any], float]]:
    """Run trials one after another until the searcher says FINISHED: [(config, loss)]."""
    out = []
    for i in range(start, start + limit):
        config = searcher.suggest(f"t{i}")
        if config == FINISHED:
            break
        assert isinstance(config, dict)
        loss = objective(config)
        searcher.on_trial_result(f"t{i}", {"loss": loss, "training_iteration": 1})
        searcher.on_trial_complete(f"t{i}", {"loss": loss, "training_iteration": 1})
        out.append((config, loss))
    return out


# -- translating the space ---------------------------------------------------------------------

def test_optuna_translates_every_supported_domain() -> None:
    space = {
        "params": {"eta": tune.uniform(0.2, 0.4), "lr": tune.loguniform(1e-4, 1.0),
                   "frac": tune.quniform(0.0, 1.0, 0.25), "objective": "binary:logistic"},
        "depth": tune.randint(1, 6),
        "leaves": tune.lograndint(2, 256),
        "bins": tune.qrandint(0, 10, 5),
        "units": tune.qlograndint(8, 512, 8),
        "act": tune.choice(["relu", "tanh"]),
    }
    searcher = prepared(OptunaSearch(seed=0), space, 20)
    D = optuna.distributions  # noqa: N806
    assert searcher._distributions == {
        "params/eta": D.FloatDistribution(0.2, 0.4),
        "params/lr": D.FloatDistribution(1e-4, 1.0, log=True),
        "params/frac": D.FloatDistribution(0.0, 1.0, step=0.25),
        "depth": D.IntDistribution(1, 5),            # randint excludes its upper bound
        "leaves": D.IntDistribution(2, 255, log=True),
        "bins": D.IntDistribution(0, 10, step=5),    # qrandint includes it (Ray's semantics)
        "units": D.IntDistribution(8, 512, log=True),  # Optuna has no quantized log domain
        "act": D.CategoricalDistribution(["relu", "tanh"]),
    }
    configs = [c for c, _ in search(searcher, lambda c: c["params"]["eta"])]
    assert len(configs) == 20
    for c in configs:
        assert set(c) == {"params", "depth", "leaves", "bins", "units", "act"}
        assert c["params"]["objective"] == "binary:logistic"  # constants kept, nesting restored
        assert 0.2 <= c["params"]["eta"] <= 0.4 and 1e-4 <= c["params"]["lr"] <= 1.0
        assert c["params"]["frac"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        assert c["depth"] in range(1, 6) and 2 <= c["leaves"] <= 255
        assert c["bins"] in (0, 5, 10) and c["act"] in ("relu", "tanh") and 8 <= c["units"] <= 512


@pytest.mark.parametrize(
    ("value", "message"),
    [(tune.grid_search([1, 2]), "OptunaSearch cannot use GridSearch at a.b"),
     (tune.sample_from(lambda spec: 1), "OptunaSearch cannot use Function at a.b"),
     (tune.randn(0, 1), r"cannot sample a normal distribution \(a.b\)")],
    ids=["grid", "sample_from", "randn"],
)
def test_optuna_rejects_what_it_cannot_sample(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        prepared(OptunaSearch(), {"a": {"b": value}}, 4)


def test_optuna_needs_a_metric_and_a_mode() -> None:
    with pytest.raises(ConfigError, match=r"OptunaSearch needs metric= and mode='min'\|'max'"):
        OptunaSearch().set_search_properties(None, None, QUADRATIC, 4, 0)
    own = OptunaSearch(metric="acc", mode="max")
    own.set_search_properties(None, None, QUADRATIC, 4, 0)  # its own settings are enough
    assert own._study.direction == optuna.study.StudyDirection.MAXIMIZE


# -- learning ----------------------------------------------------------------------------------

def test_optuna_finds_the_optimum_of_a_quadratic_better_than_random_search() -> None:
    n, seeds = 30, range(5)
    tpe = [min(loss for _, loss in search(prepared(OptunaSearch(), QUADRATIC, n, seed), quadratic)) for seed in seeds]
    rnd = [min(loss for _, loss in search(prepared(BasicVariantGenerator(), QUADRATIC, n, seed), quadratic))
           for seed in seeds]
    # numbers for these seeds: TPE ~0.7 on average, random ~6
    assert sum(tpe) / len(tpe) < 1.0
    assert sum(tpe) / len(tpe) <= sum(rnd) / len(rnd)
    assert sum(t <= r for t, r in zip(tpe, rnd, strict=True)) >= 4


def test_optuna_with_a_seed_is_repeatable() -> None:
    first = search(prepared(OptunaSearch(seed=3), QUADRATIC, 15), quadratic)
    second = search(prepared(OptunaSearch(seed=3), QUADRATIC, 15), quadratic)
    assert first == second and len(first) == 15
    assert search(prepared(OptunaSearch(), QUADRATIC, 15, seed=3), quadratic) == first  # TuneConfig.seed


def test_optuna_records_intermediate_results_and_failures() -> None:
    searcher = prepared(OptunaSearch(seed=0), QUADRATIC, 3)
    searcher.suggest("a")
    for step, loss in ((1, 5.0), (2, 4.0), (2, 3.0), (3, 2.0)):  # step 2 twice: a replayed report
        searcher.on_trial_result("a", {"loss": loss, "training_iteration": step})
    searcher.on_trial_result("a", {"other": 1.0, "training_iteration": 4})  # no metric: ignored
    searcher.on_trial_complete("a", {"loss": 2.0})
    searcher.suggest("b")
    searcher.on_trial_complete("b", None, error=True)
    searcher.suggest("c")
    searcher.on_trial_complete("c", {"other": 1.0})  # ended without the metric
    a, b, c = searcher._study.trials
    assert a.intermediate_values == {1: 5.0, 2: 4.0, 3: 2.0} and a.value == 2.0
    assert a.state == optuna.trial.TrialState.COMPLETE
    assert b.state == c.state == optuna.trial.TrialState.FAIL
    assert searcher.suggest("d") == FINISHED


# -- state -------------------------------------------------------------------------------------

def test_optuna_state_round_trip_continues_the_same_search() -> None:
    straight = search(prepared(OptunaSearch(seed=1), QUADRATIC, 20), quadratic)

    before = prepared(OptunaSearch(seed=1), QUADRATIC, 20)
    head = search(before, quadratic, limit=12)
    state = pickle.loads(pickle.dumps(before.get_state()))  # the experiment state is pickled
    after = prepared(OptunaSearch(seed=1), QUADRATIC, 20)
    after.set_state(state)
    tail = search(after, quadratic, start=12)
    assert head + tail == straight
    assert len(after._study.trials) == 20


def test_optuna_state_keeps_trials_that_were_running() -> None:
    before = prepared(OptunaSearch(seed=0), QUADRATIC, 4)
    search(before, quadratic, limit=2)
    running = before.suggest("t2")  # the driver dies while t2 runs
    assert isinstance(running, dict)
    after = prepared(OptunaSearch(seed=0), QUADRATIC, 4)
    after.set_state(pickle.loads(pickle.dumps(before.get_state())))
    after.on_trial_result("t2", {"loss": 7.0, "training_iteration": 1})  # t2 restarted and reports
    after.on_trial_complete("t2", {"loss": 6.0, "training_iteration": 2})
    trial = after._study.trials[2]
    assert trial.params == running
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 6.0
    assert trial.intermediate_values == {1: 7.0}
    assert len(search(after, quadratic, start=3)) == 1  # one of the four samples is left
    assert after.suggest("t9") == FINISHED


def test_basic_generator_state_round_trip() -> None:
    space = {"x": tune.uniform(0, 1), "g": tune.grid_search(["a", "b"])}
    straight = search(prepared(BasicVariantGenerator(), space, 3, seed=None), lambda c: 0.0)
    assert len(straight) == 6
    before = prepared(BasicVariantGenerator(), space, 3, seed=None)
    head = search(before, lambda c: 0.0, limit=2)
    after = prepared(BasicVariantGenerator(), space, 3, seed=None)  # unseeded: other configs...
    after.set_state(pickle.loads(pickle.dumps(before.get_state())))  # ...until it is restored
    tail = search(after, lambda c: 0.0, start=2)
    assert [c for c, _ in head + tail] == before.get_state()["configs"]
    assert len(tail) == 4


# -- ConcurrencyLimiter ------------------------------------------------------------------------

def test_concurrency_limiter_caps_unfinished_trials() -> None:
    limited = prepared(ConcurrencyLimiter(BasicVariantGenerator(), max_concurrent=2),
                       {"x": tune.grid_search([0, 1, 2, 3, 4])}, 1)
    assert isinstance(limited.suggest("a"), dict) and isinstance(limited.suggest("b"), dict)
    assert limited.suggest("c") is None  # "nothing right now", not FINISHED
    limited.on_trial_result("a", {"loss": 1.0, "training_iteration": 1})
    assert limited.suggest("c") is None  # a result frees nothing
    limited.on_trial_complete("a", {"loss": 1.0})
    assert limited.suggest("c") == {"x": 2}
    limited.on_trial_complete("b", None, error=True)  # an errored trial frees its slot too
    assert limited.suggest("d") == {"x": 3}
    assert limited.suggest("e") is None

    restored = prepared(ConcurrencyLimiter(BasicVariantGenerator(), max_concurrent=2),
                        {"x": tune.grid_search([0, 1, 2, 3, 4])}, 1)
    restored.set_state(pickle.loads(pickle.dumps(limited.get_state())))
    assert restored.suggest("e") is None  # c and d are still running
    restored.on_trial_complete("c", {"loss": 0.0})
    assert restored.suggest("e") == {"x": 4}
    restored.on_trial_complete("d", {"loss": 0.0})
    restored.on_trial_complete("e", {"loss": 0.0})
    assert restored.suggest("f") == FINISHED


def test_concurrency_limiter_over_optuna_passes_everything_through() -> None:
    inner = OptunaSearch(seed=0)
    limited = prepared(ConcurrencyLimiter(inner, max_concurrent=1), QUADRATIC, 5)
    assert (limited.metric, limited.mode) == ("loss", "min")
    results = search(limited, quadratic)
    assert len(results) == 5
    assert [t.value for t in inner._study.trials] == [loss for _, loss in results]


def test_concurrency_limiter_rejects_a_limit_below_one() -> None:
    with pytest.raises(ConfigError, match="max_concurrent must be >= 1, got 0"):
        ConcurrencyLimiter(BasicVariantGenerator(), max_concurrent=0)


def test_optuna_tries_the_points_to_evaluate_first_as_ray_does() -> None:
    # Ray: OptunaSearch(points_to_evaluate=[{...}]); and ConcurrencyLimiter from ray.tune.search
    from airflowless.tune.search import ConcurrencyLimiter as Limiter

    assert Limiter is ConcurrencyLimiter
    space = {"x": tune.uniform(-10, 10), "nested": {"y": tune.uniform(-10, 10)}, "fixed": 1}
    points = [{"x": 3.0, "nested": {"y": -1.0}}, {"x": 0.5, "nested": {"y": 0.5}}]
    searcher = prepared(OptunaSearch(seed=0, points_to_evaluate=points), space, 5)
    configs = [c for c, _ in search(searcher, lambda c: (c["x"] - 3) ** 2 + (c["nested"]["y"] + 1) ** 2)]
    assert configs[:2] == [{"x": 3.0, "nested": {"y": -1.0}, "fixed": 1}, {"x": 0.5, "nested": {"y": 0.5}, "fixed": 1}]
    assert len(configs) == 5 and all(-10 <= c["x"] <= 10 for c in configs[2:])
    with pytest.raises(ConfigError, match=r"names \['z'\], which the param space does not sample"):
        prepared(OptunaSearch(points_to_evaluate=[{"z": 1}]), space, 2)
    with pytest.raises(ConfigError, match="a list of configs"):
        OptunaSearch(points_to_evaluate={"x": 1})  # type: ignore[arg-type]
