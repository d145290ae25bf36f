"""HyperOptSearch: space translation, search quality on a quadratic, state round trip."""

from __future__ import annotations

import pytest

from airflowless import tune
from airflowless.errors import ConfigError
from airflowless.tune.search.hyperopt import HyperOptSearch
from airflowless.tune.search.searcher import FINISHED

SPACE = {"x": tune.uniform(-5, 5), "nested": {"n": tune.randint(1, 4), "c": tune.choice(["a", "b"]),
                                               "lr": tune.loguniform(1e-4, 1e-1)}, "fixed": 7}


def loss(config: dict) -> float:
    return (config["x"] - 2) ** 2 + config["nested"]["n"]


def run(searcher: HyperOptSearch, n: int) -> list[float]:
    searcher.set_search_properties("loss", "min", SPACE, n, 0)
    found = []
    for i in range(n + 1):
        config = searcher.suggest(f"t{i}")
        if config == FINISHED:
            break
        assert isinstance(config, dict)
        assert -5 <= config["x"] <= 5 and config["nested"]["n"] in (1, 2, 3)
        assert config["nested"]["c"] in ("a", "b") and 1e-4 <= config["nested"]["lr"] <= 1e-1
        assert config["fixed"] == 7
        value = loss(config)
        found.append(value)
        searcher.on_trial_complete(f"t{i}", {"loss": value})
    return found


def test_hyperopt_finds_the_quadratics_minimum_region() -> None:
    found = run(HyperOptSearch(n_initial_points=5, seed=3), 40)
    assert len(found) == 40
    assert min(found) < 1.3, "TPE gets near the optimum (loss 1 at x=2, n=1)"
    assert min(found[20:]) <= min(found[:5])


def test_hyperopt_state_round_trip_continues_the_search() -> None:
    first = HyperOptSearch(n_initial_points=3, seed=1)
    run(first, 6)
    restored = HyperOptSearch(n_initial_points=3, seed=1)
    restored.set_search_properties("loss", "min", SPACE, 6, 0)
    restored.set_state(first.get_state())
    assert restored.suggest("again") == FINISHED


def test_hyperopt_rejects_grid_search() -> None:
    with pytest.raises(ConfigError, match="cannot use GridSearch"):
        HyperOptSearch().set_search_properties("loss", "min", {"x": tune.grid_search([1, 2])}, 2, 0)


def test_hyperopt_tries_the_points_to_evaluate_first_and_learns_from_them() -> None:
    # Ray: HyperOptSearch(points_to_evaluate=[{...}])
    points = [{"x": 2.0, "nested": {"n": 1, "c": "b", "lr": 0.01}},
              {"x": -4.0, "nested": {"n": 3, "c": "a", "lr": 0.001}}]
    searcher = HyperOptSearch(n_initial_points=2, seed=3, points_to_evaluate=points)
    searcher.set_search_properties("loss", "min", SPACE, 6, 0)
    configs = []
    for i in range(6):
        config = searcher.suggest(f"t{i}")
        assert isinstance(config, dict)
        configs.append(config)
        if i == 0:  # the state saved now keeps the second point for a restored search
            restored = HyperOptSearch(n_initial_points=2, seed=3, points_to_evaluate=points)
            restored.set_search_properties("loss", "min", SPACE, 6, 0)
            restored.set_state(searcher.get_state())
            assert restored.suggest("again") == {**points[1], "fixed": 7}
        searcher.on_trial_complete(f"t{i}", {"loss": loss(config)})
    assert configs[:2] == [{**points[0], "fixed": 7}, {**points[1], "fixed": 7}]
    assert [t["result"]["loss"] for t in searcher._trials.trials[:2]] == [1.0, 39.0]  # TPE saw their losses
    with pytest.raises(ConfigError, match=r"misses \['nested/lr'\]"):
        HyperOptSearch(points_to_evaluate=[{"x": 1.0, "nested": {"n": 1, "c": "a"}}]).set_search_properties(
            "loss", "min", SPACE, 2, 0)
    with pytest.raises(ConfigError, match=r"gives nested/c='z', not one of its choices \['a', 'b'\]"):
        HyperOptSearch(points_to_evaluate=[{**points[0], "nested": {**points[0]["nested"], "c": "z"}}]
                       ).set_search_properties("loss", "min", SPACE, 2, 0)
