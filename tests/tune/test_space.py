"""Search spaces and the basic variant generator: sampling, grids, sample_from, seeds, bad spaces.

No cluster: configs are drawn the way ``Tuner.fit`` draws them, through
:class:`BasicVariantGenerator`.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from airflowless import tune
from airflowless.errors import ConfigError
from airflowless.tune.search.searcher import FINISHED, BasicVariantGenerator
from airflowless.tune.search.space import Domain
from airflowless.tune.search.variants import check_space

N = 2_000


def configs(space: dict[str, Any], num_samples: int = 1, seed: int | None = 0) -> list[dict[str, Any]]:
    """Every config the basic generator suggests, in order, until it says FINISHED."""
    gen = BasicVariantGenerator()
    gen.set_search_properties(None, None, space, num_samples, seed)
    out = []
    for i in range(10_000):
        config = gen.suggest(f"t{i}")
        if config == FINISHED:
            return out
        assert isinstance(config, dict)
        out.append(config)
    raise AssertionError("the generator never finished")


def draw(domain: Domain, n: int = N, seed: int = 0) -> list[Any]:
    rng = random.Random(seed)
    return [domain.sample(rng) for _ in range(n)]


def is_multiple(value: float, q: float) -> bool:
    return math.isclose(value / q, round(value / q), abs_tol=1e-9)


# -- every distribution samples in its range ---------------------------------------------------

def test_uniform_covers_its_range_and_nothing_else() -> None:
    values = draw(tune.uniform(0.2, 0.4))
    assert all(0.2 <= v <= 0.4 for v in values)
    assert min(values) < 0.21 and max(values) > 0.39
    assert statistics.mean(values) == pytest.approx(0.3, abs=0.01)


def test_quniform_rounds_to_multiples_of_q() -> None:
    values = draw(tune.quniform(0.0, 1.0, 0.25))
    assert all(0.0 <= v <= 1.0 and is_multiple(v, 0.25) for v in values)
    assert {round(v, 9) for v in values} == {0.0, 0.25, 0.5, 0.75, 1.0}


def test_loguniform_is_uniform_in_log_space() -> None:
    values = draw(tune.loguniform(1e-4, 1.0))
    assert all(1e-4 <= v <= 1.0 for v in values)
    logs = [math.log10(v) for v in values]
    assert statistics.mean(logs) == pytest.approx(-2.0, abs=0.1)  # a plain uniform would give ~ -0.3
    assert sum(v < 1e-3 for v in values) > N * 0.2  # a quarter of the decades lies below 1e-3


def test_qloguniform_is_quantized_and_in_range() -> None:
    values = draw(tune.qloguniform(5, 1000, 5))
    assert all(5 <= v <= 1000 and is_multiple(v, 5) for v in values)
    assert statistics.median(values) < 200  # log-distributed: most mass at the low end


def test_randn_and_qrandn() -> None:
    values = draw(tune.randn(10.0, 2.0))
    assert statistics.mean(values) == pytest.approx(10.0, abs=0.2)
    assert statistics.stdev(values) == pytest.approx(2.0, abs=0.2)
    quantized = draw(tune.qrandn(0.0, 1.0, 0.5))
    assert all(is_multiple(v, 0.5) for v in quantized)


def test_randint_excludes_its_upper_bound() -> None:
    values = draw(tune.randint(1, 6))
    assert set(values) == {1, 2, 3, 4, 5}
    assert all(isinstance(v, int) for v in values)


def test_qrandint_quantizes_and_includes_its_upper_bound_as_ray_does() -> None:
    values = draw(tune.qrandint(0, 10, 5))
    assert set(values) == {0, 5, 10}


def test_lograndint_and_qlograndint() -> None:
    values = draw(tune.lograndint(1, 100))
    assert all(1 <= v < 100 and isinstance(v, int) for v in values)
    assert sum(v < 10 for v in values) > N * 0.4  # half of the log range lies below 10
    quantized = draw(tune.qlograndint(5, 100, 5))
    assert all(5 <= v <= 100 and v % 5 == 0 for v in quantized)


def test_choice_picks_every_category() -> None:
    values = draw(tune.choice(["a", "b", 3]), n=300)
    assert set(values) == {"a", "b", 3}


# -- nested dicts ------------------------------------------------------------------------------

def test_nested_dicts_keep_their_shape_and_constants() -> None:
    space = {
        "params": {"eta": tune.uniform(0.2, 0.4), "max_depth": tune.randint(1, 6),
                   "objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        "num_boost_round": 20,
        "model": {"layers": {"width": tune.choice([16, 32])}},
    }
    found = configs(space, num_samples=5)
    assert len(found) == 5
    for config in found:
        assert set(config) == {"params", "num_boost_round", "model"}
        assert config["num_boost_round"] == 20
        assert config["params"]["objective"] == "binary:logistic"
        assert config["params"]["eval_metric"] == ["logloss", "error"]
        assert 0.2 <= config["params"]["eta"] <= 0.4
        assert config["params"]["max_depth"] in range(1, 6)
        assert config["model"]["layers"]["width"] in (16, 32)
    assert len({c["params"]["eta"] for c in found}) == 5  # each sample is drawn afresh
    assert isinstance(space["params"]["eta"], Domain)  # the space itself is not changed


def test_a_list_constant_is_not_shared_between_configs() -> None:
    found = configs({"layers": [1, 2], "x": tune.uniform(0, 1)}, num_samples=2)
    found[0]["layers"].append(3)
    assert found[1]["layers"] == [1, 2]


# -- grid_search x num_samples -----------------------------------------------------------------

@pytest.mark.parametrize("a_first", [True, False], ids=["a-first", "b-first"])
def test_grid_times_num_samples_count_and_order(a_first: bool) -> None:
    # Ray's BasicVariantGenerator: the whole grid once per sample; grid keys sorted by
    # path, the first one varying fastest, whatever order the dict has; random domains
    # drawn afresh for every point.
    a, b = tune.grid_search([1, 2]), tune.grid_search(["x", "y", "z"])
    space = {"a": a, "b": b} if a_first else {"b": b, "a": a}
    space["c"] = tune.uniform(0, 1)
    found = configs(space, num_samples=2)
    assert len(found) == 2 * 2 * 3
    one_sample = [(1, "x"), (2, "x"), (1, "y"), (2, "y"), (1, "z"), (2, "z")]
    assert [(c["a"], c["b"]) for c in found] == one_sample * 2
    assert len({c["c"] for c in found}) == 12


def test_nested_grids_are_ordered_by_their_path() -> None:
    space = {"model": {"depth": tune.grid_search([2, 4])}, "lr": tune.grid_search([0.1, 0.01])}
    found = configs(space)
    assert [(c["lr"], c["model"]["depth"]) for c in found] == [(0.1, 2), (0.01, 2), (0.1, 4), (0.01, 4)]
    space = {"lr": tune.grid_search([0.1, 0.01]), "model": {"depth": tune.grid_search([2, 4])}}
    assert [(c["lr"], c["model"]["depth"]) for c in configs(space)] == [(0.1, 2), (0.01, 2), (0.1, 4), (0.01, 4)]


def test_a_grid_alone_gives_its_values_once_per_sample() -> None:
    found = configs({"x": tune.grid_search([3, 1, 2])}, num_samples=3)
    assert [c["x"] for c in found] == [3, 1, 2] * 3
    gen = BasicVariantGenerator()
    gen.set_search_properties(None, None, {"x": tune.grid_search([3, 1, 2])}, 3, 0)
    assert gen.total == 9


def test_no_space_gives_num_samples_empty_configs() -> None:
    assert configs({}, num_samples=3) == [{}, {}, {}]


# -- sample_from -------------------------------------------------------------------------------

def test_sample_from_sees_the_other_sampled_values() -> None:
    space = {
        "a": tune.randint(1, 100),
        "grid": tune.grid_search([10, 20]),
        "params": {"eta": tune.uniform(0, 1)},
        "double_a": tune.sample_from(lambda spec: spec.config.a * 2),
        "nested": {"a_plus_grid": tune.sample_from(lambda spec: spec.config["a"] + spec.config.grid)},
        "eta_too": tune.sample_from(lambda spec: spec.config.params.eta),
        "constant": tune.sample_from(lambda: 7),
    }
    found = configs(space, num_samples=3)
    assert len(found) == 6
    for c in found:
        assert c["double_a"] == 2 * c["a"]
        assert c["nested"]["a_plus_grid"] == c["a"] + c["grid"]
        assert c["eta_too"] == c["params"]["eta"]
        assert c["constant"] == 7


def test_sample_from_can_draw_random_values_itself() -> None:
    found = configs({"n": tune.sample_from(lambda spec: random.choice([1, 2, 3]))}, num_samples=30)
    assert {c["n"] for c in found} <= {1, 2, 3}


def test_an_error_inside_sample_from_is_raised_as_is_and_once() -> None:
    calls = []

    def broken(spec: Any) -> Any:
        calls.append(spec)
        return spec.config.a + "text"  # a TypeError of the user's own

    with pytest.raises(TypeError, match="unsupported operand"):
        configs({"a": 1, "b": tune.sample_from(broken)})
    assert len(calls) == 1


# -- seeds -------------------------------------------------------------------------------------

SEEDED = {"lr": tune.loguniform(1e-4, 1), "width": tune.choice([16, 32, 64]), "seed": tune.randint(0, 10**6),
          "g": tune.grid_search([1, 2])}


def test_the_same_seed_gives_the_same_configs() -> None:
    assert configs(SEEDED, num_samples=4, seed=7) == configs(SEEDED, num_samples=4, seed=7)
    assert configs(SEEDED, num_samples=4, seed=7) != configs(SEEDED, num_samples=4, seed=8)


def test_random_state_overrides_the_experiment_seed() -> None:
    gen = BasicVariantGenerator(random_state=7)
    gen.set_search_properties(None, None, SEEDED, 2, 123)
    mine = [gen.suggest(str(i)) for i in range(4)]
    assert mine == configs(SEEDED, num_samples=2, seed=7)


def test_without_a_seed_configs_differ_between_runs() -> None:
    assert configs(SEEDED, num_samples=4, seed=None) != configs(SEEDED, num_samples=4, seed=None)


# -- invalid spaces ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: tune.uniform(1.0, 0.5), r"a float range needs lower < upper, got \(1.0, 0.5\)"),
        (lambda: tune.uniform(1.0, 1.0), r"lower < upper"),
        (lambda: tune.loguniform(0.0, 1.0), r"a log-uniform range needs lower > 0, got 0.0"),
        (lambda: tune.quniform(0, 1, 0), r"the quantization q must be > 0, got 0"),
        (lambda: tune.randint(5, 5), r"an integer range needs lower < upper, got \(5, 5\)"),
        (lambda: tune.randint(6, 1), r"an integer range needs lower < upper"),
        (lambda: tune.lograndint(0, 10), r"a log integer range needs lower > 0, got 0"),
        (lambda: tune.qrandint(0, 10, 0), r"the quantization q must be > 0, got 0"),
        (lambda: tune.qrandint(0, 10, -5), r"the quantization q must be > 0, got -5"),
        (lambda: tune.choice([]), r"choice needs at least one category"),
        (lambda: tune.grid_search([]), r"grid_search needs at least one value"),
    ],
    ids=["uniform-reversed", "uniform-empty", "loguniform-zero", "quniform-q0", "randint-empty",
         "randint-reversed", "lograndint-zero", "qrandint-q0", "qrandint-negative-q", "choice-empty",
         "grid-empty"],
)
def test_invalid_domains_raise_config_error(make: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        make()
    assert isinstance(caught.value, ValueError)  # user errors are ValueErrors too


def test_a_param_space_must_be_a_dict() -> None:
    with pytest.raises(ConfigError, match=r"param_space must be a dict \(nested dicts allowed\), got list"):
        check_space([tune.uniform(0, 1)])
    with pytest.raises(ConfigError, match="param_space must be a dict"):
        tune.Tuner(lambda config: None, param_space="lr=0.1")  # type: ignore[arg-type]
    assert check_space(None) == {}


def test_a_domain_class_instead_of_a_domain_is_named() -> None:
    from airflowless.tune.search.space import Float

    with pytest.raises(ConfigError, match=r"param_space\[params.eta\] is the class Float; call it"):
        check_space({"params": {"eta": Float}})
