"""Differential tests: random Dataset plans over random tables, compared with pandas computed directly.

Tables have null and NaN values, empty blocks and 1-5 blocks; plans chain
filters, projections, renames, added columns, map_batches, limits,
repartitions and shuffles, and end in a consumer (rows, sort, groupby
aggregates, map_groups, whole-dataset aggregates, splits, a self-join).
Every plan runs with the optimizer's rules on and off.

The number of examples is the one setting of this module: ``DIFFERENTIAL_EXAMPLES``
in the environment (default 25, about a minute on 2 cores), e.g.
``DIFFERENTIAL_EXAMPLES=300 pytest tests/data/test_differential.py``.
The ``@example`` cases are the failures this suite found in the code of
issue 13 (null groups, null sort keys, splits over a shuffle), kept as regressions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from airflowless import data
from airflowless.data import DataContext

pytestmark = pytest.mark.usefixtures("cluster_client", "every_block_through_shared_memory")


@pytest.fixture(scope="module")
def every_block_through_shared_memory() -> Iterator[None]:
    """Every block the driver reads comes through /dev/shm here, however small (tests/data/test_shared_blocks.py
    covers the rest of the hand-off; this checks its answers on every plan the properties draw)."""
    ctx = DataContext.get_current()
    saved = ctx.shared_memory_min_bytes
    ctx.shared_memory_min_bytes = 0
    yield
    ctx.shared_memory_min_bytes = saved

EXAMPLES = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 25,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a cluster run takes minutes
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

# -- tables ------------------------------------------------------------------------

FLOATS = st.one_of(st.none(), st.just(float("nan")), st.floats(-100, 100, allow_nan=False).map(lambda v: round(v, 2)))


@st.composite
def tables(draw: st.DrawFn) -> tuple[pa.Table, list[int]]:
    """A table (``i`` a unique row id; keys ``k`` int and ``s`` text; values ``x``, ``y``) and block cuts."""
    n = draw(st.integers(0, 30))
    k = draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=n, max_size=n))
    s = draw(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "c"])), min_size=n, max_size=n))
    x = draw(st.lists(FLOATS, min_size=n, max_size=n))
    y = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
    table = pa.table({"i": pa.array(range(n), pa.int64()), "k": pa.array(k, pa.int64()),
                      "s": pa.array(s, pa.string()), "x": pa.array(x, pa.float64(), from_pandas=False),
                      "y": pa.array(y, pa.int64())})
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))  # repeated cuts make empty blocks
    return table, cuts


def dataset(table: pa.Table, cuts: list[int]) -> data.Dataset:
    bounds = [0, *cuts, table.num_rows]
    return data.from_arrow([table.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])


# -- steps: a Dataset transform and the same on a pandas frame ------------------------


@dataclass(frozen=True)
class Step:
    name: str
    on_dataset: Callable[[data.Dataset], data.Dataset]
    on_frame: Callable[[pd.DataFrame], pd.DataFrame]
    keeps_order: bool = True

    def __repr__(self) -> str:
        return self.name


def _add_one(batch: pd.DataFrame) -> pd.DataFrame:
    return batch.assign(y=batch["y"] + 1)


def _double_y(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "y": batch["y"] * 2}


def steps(columns: frozenset[str]) -> st.SearchStrategy[Step]:
    """Transforms valid on a frame with ``columns`` (``i`` and ``y`` are never dropped)."""
    options: list[st.SearchStrategy[Step]] = [
        st.integers(-50, 50).map(lambda c: Step(f"filter(x > {c})", lambda d: d.filter(expr=data.col("x") > c),
                                                 lambda f: f[f["x"] > c])),
        st.integers(0, 3).map(lambda c: Step(f"filter(k == {c})", lambda d: d.filter(expr=data.col("k") == c),
                                              lambda f: f[f["k"] == c])),
        st.just(Step("filter(row y even)", lambda d: d.filter(lambda r: r["y"] % 2 == 0),
                     lambda f: f[f["y"] % 2 == 0])),
        st.integers(0, 2).map(lambda c: Step(f"filter(expr='y % 3 == {c} or k > 1')",  # Ray's text form
                                             lambda d: d.filter(expr=f"y % 3 == {c} or k > 1"),
                                             lambda f: f[(f["y"] % 3 == c) | (f["k"] > 1)])),
        st.just(Step("map_batches(pandas y+1)", lambda d: d.map_batches(_add_one, batch_format="pandas"),
                     _add_one)),
        st.just(Step("map_batches(numpy y*2)", lambda d: d.map_batches(_double_y, batch_size=3),
                     lambda f: f.assign(y=f["y"] * 2))),
        st.just(Step("add_column(z)", lambda d: d.add_column("z", lambda b: b["y"] * 10),
                     lambda f: f.assign(z=f["y"] * 10))),
        st.integers(0, 20).map(lambda n: Step(f"limit({n})", lambda d: d.limit(n), lambda f: f.head(n))),
        st.integers(1, 4).map(lambda n: Step(f"repartition({n})", lambda d: d.repartition(n), lambda f: f)),
        st.integers(0, 9).map(lambda seed: Step(f"random_shuffle({seed})", lambda d: d.random_shuffle(seed=seed),
                                                lambda f: f, keeps_order=False)),
    ]
    droppable = sorted(columns - {"i", "y"})
    if droppable:
        options.append(st.sampled_from(droppable).map(
            lambda c: Step(f"drop({c})", lambda d: d.drop_columns([c]), lambda f: f.drop(columns=[c]))))
        options.append(st.sampled_from(droppable).map(lambda c: Step(
            f"select(without {c})", lambda d: d.select_columns([x for x in sorted(columns) if x != c]),
            lambda f: f[[x for x in sorted(columns) if x != c]])))
    return st.one_of(options)


@st.composite
def plans(draw: st.DrawFn) -> list[Step]:
    """Up to four steps; a limit only while the row order is known (after a shuffle it is not)."""
    chosen: list[Step] = []
    columns = frozenset({"i", "k", "s", "x", "y"})
    ordered = True
    for _ in range(draw(st.integers(0, 4))):
        step = draw(steps(columns))
        if step.name.startswith("limit") and not ordered:
            continue
        try:
            probe = step.on_frame(pd.DataFrame({c: [] for c in sorted(columns)}))
        except KeyError:
            continue  # it reads a column dropped before it
        ordered = ordered and step.keeps_order
        columns = frozenset(probe.columns)
        chosen.append(step)
    return chosen


def run_plan(table: pa.Table, cuts: list[int], chosen: list[Step]) -> tuple[data.Dataset, pd.DataFrame, bool]:
    ds, frame, ordered = dataset(table, cuts), table.to_pandas(), True
    for step in chosen:
        ds, frame, ordered = step.on_dataset(ds), step.on_frame(frame), ordered and step.keeps_order
    return ds, frame.reset_index(drop=True), ordered


# -- comparing ----------------------------------------------------------------------


def same_rows(got: pd.DataFrame, expected: pd.DataFrame, *, ordered: bool) -> None:
    if len(expected) == 0:
        assert len(got) == 0
        return
    got = got.reset_index(drop=True)
    if not ordered:
        got, expected = got.sort_values("i", ignore_index=True), expected.sort_values("i", ignore_index=True)
    pd.testing.assert_frame_equal(got[list(expected.columns)].astype(object).where(got.notna(), None),
                                  expected.astype(object).where(expected.notna(), None), check_dtype=False)


def both_ways(check: Callable[[], None]) -> None:
    """``check`` with the optimizer's rules on, then off."""
    ctx = DataContext.get_current()
    for enabled in (True, False):
        ctx.optimizer_enabled = enabled
        try:
            check()
        finally:
            ctx.optimizer_enabled = True


AGGS = ("count", "sum", "mean", "min", "max", "std")


def expected_groups(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    grouped = frame.groupby(key, dropna=False, sort=True)
    out = grouped.size().rename("count()").to_frame()
    for name in AGGS[1:]:
        out[f"{name}(x)"] = getattr(grouped["x"], name)()
    return out.reset_index()


def close(got: Any, expected: Any) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(expected, dtype=float), rtol=1e-9,
                               atol=1e-9, equal_nan=True)


# -- the properties ------------------------------------------------------------------

NULL_KEYS = (pa.table({"i": [0, 1, 2, 3, 4, 5], "k": [None, 1, None, 2, 1, None], "s": ["a", None, "b", None, "a", "c"],
                       "x": [1.0, None, 3.0, float("nan"), 5.0, 7.0], "y": [1, 2, 3, 4, 5, 6]}), [2, 4])


@SETTINGS
@given(source=tables(), chosen=plans())
@example(source=NULL_KEYS, chosen=[])
@example(source=NULL_KEYS, chosen=[Step("repartition(9)", lambda d: d.repartition(9), lambda f: f),
                                   Step("filter(k == 1)", lambda d: d.filter(expr=data.col("k") == 1),
                                        lambda f: f[f["k"] == 1])])  # more blocks than rows: blocks lost columns
def test_rows_match_pandas(source: tuple[pa.Table, list[int]], chosen: list[Step]) -> None:
    ds, frame, ordered = run_plan(*source, chosen)
    both_ways(lambda: same_rows(ds.to_pandas(), frame, ordered=ordered))
    both_ways(lambda: pytest.approx(ds.count()) == len(frame) or pytest.fail(f"count {ds.count()} != {len(frame)}"))


@SETTINGS
@given(source=tables(), chosen=plans(), key=st.sampled_from(["k", "s", "y"]), descending=st.booleans())
@example(source=NULL_KEYS, chosen=[], key="k", descending=True)  # null keys sorted into the middle
@example(source=NULL_KEYS, chosen=[], key="s", descending=False)  # None in a text key crashed
def test_sort_matches_pandas(source: tuple[pa.Table, list[int]], chosen: list[Step], key: str,
                             descending: bool) -> None:
    ds, frame, _ = run_plan(*source, chosen)
    if key not in frame.columns:
        return
    expected = frame.sort_values(key, ascending=not descending, kind="stable", na_position="last")

    def check() -> None:
        got = ds.sort(key, descending=descending).to_pandas()
        assert len(got) == len(expected)
        if len(expected):
            # the key sequence is exact; rows with equal keys may come in any order (a shuffle may be dropped)
            assert got[key].isna().tolist() == expected[key].isna().tolist()
            assert got[key].dropna().tolist() == expected[key].dropna().tolist()
            assert sorted(got["i"]) == sorted(expected["i"])

    both_ways(check)


@SETTINGS
@given(source=tables(), chosen=plans(), keys=st.permutations(["k", "s", "y"]).map(lambda p: p[:2]),
       descending=st.lists(st.booleans(), min_size=2, max_size=2))
@example(source=NULL_KEYS, chosen=[], keys=["k", "y"], descending=[True, False])  # every list read as all-descending
@example(source=NULL_KEYS, chosen=[], keys=["k", "y"], descending=[False, False])
def test_sort_on_two_keys_with_a_direction_each_matches_pandas(source: tuple[pa.Table, list[int]],
                                                               chosen: list[Step], keys: list[str],
                                                               descending: list[bool]) -> None:
    ds, frame, _ = run_plan(*source, chosen)
    if not set(keys) <= set(frame.columns):
        return
    expected = frame.sort_values(keys, ascending=[not d for d in descending], kind="stable", na_position="last")

    def check() -> None:
        got = ds.sort(keys, descending=descending).to_pandas()
        assert len(got) == len(expected)
        for key in keys:  # the key sequences are exact; rows with equal keys may come in any order
            assert got[key].isna().tolist() == expected[key].isna().tolist()
            assert got[key].astype(object).where(got[key].notna(), None).tolist() == \
                expected[key].astype(object).where(expected[key].notna(), None).tolist()

    both_ways(check)


def test_sort_directions_must_be_one_bool_per_key() -> None:
    ds = data.from_items([{"a": 1, "b": 2}])
    with pytest.raises(ValueError, match="2 descending flag.*3 key"):
        ds.sort(["a", "b", "a"], descending=[True, False])
    with pytest.raises(TypeError, match="a bool or a list of bools"):
        ds.sort("a", descending="yes")  # type: ignore[arg-type]


# numpy batches turn an int column with a null into floats in that block only
MIXED_KEYS = (pa.table({"i": [0, 1, 2, 3, 4, 5], "k": [1, 2, None, 1, 2, 1], "s": ["a"] * 6,
                        "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "y": [1, 2, 3, 4, 5, 6]}), [3])
NUMPY_MAP = Step("map_batches(numpy y*2)", lambda d: d.map_batches(_double_y, batch_size=3),
                 lambda f: f.assign(y=f["y"] * 2))


@SETTINGS
@given(source=tables(), chosen=plans(), key=st.sampled_from(["k", "s"]))
@example(source=NULL_KEYS, chosen=[], key="k")  # mean and std of the null group were NaN
@example(source=MIXED_KEYS, chosen=[NUMPY_MAP], key="k")  # int and float partials did not combine
def test_groupby_aggregates_match_pandas(source: tuple[pa.Table, list[int]], chosen: list[Step], key: str) -> None:
    ds, frame, _ = run_plan(*source, chosen)
    if key not in frame.columns or "x" not in frame.columns:
        return
    expected = expected_groups(frame, key)

    def check() -> None:
        got = ds.groupby(key).aggregate(data.Count(), data.Sum("x"), data.Mean("x"), data.Min("x"), data.Max("x"),
                                        data.Std("x")).to_pandas()
        assert len(got) == len(expected)
        if len(expected):
            assert got[key].isna().tolist() == expected[key].isna().tolist()
            assert got[key].dropna().tolist() == expected[key].dropna().tolist()
            for column in expected.columns[1:]:
                close(got[column], expected[column])

    both_ways(check)


@SETTINGS
@given(source=tables(), chosen=plans(), key=st.sampled_from(["k", "s"]))
@example(source=NULL_KEYS, chosen=[], key="k")  # each null-key row was a group of its own
@example(source=MIXED_KEYS, chosen=[NUMPY_MAP], key="k")  # 1 and 1.0 hashed apart: one key, two groups
def test_map_groups_sees_the_groups_pandas_sees(source: tuple[pa.Table, list[int]], chosen: list[Step],
                                                key: str) -> None:
    ds, frame, _ = run_plan(*source, chosen)
    if key not in frame.columns:
        return
    expected = sorted(frame.groupby(key, dropna=False).size().tolist())
    both_ways(lambda: _assert_equal(sorted(ds.groupby(key).map_groups(
        lambda g: pd.DataFrame({"n": [len(g)]})).to_pandas()["n"].tolist()) if expected else [], expected))


def _assert_equal(got: Any, expected: Any) -> None:
    assert got == expected


@SETTINGS
@given(source=tables(), chosen=plans())
def test_whole_dataset_aggregates_match_pandas(source: tuple[pa.Table, list[int]], chosen: list[Step]) -> None:
    ds, frame, _ = run_plan(*source, chosen)
    if "x" not in frame.columns:
        return
    x = frame["x"]

    def check() -> None:
        got = ds.aggregate(data.Count(), data.Sum("x"), data.Mean("x"), data.Min("x"), data.Max("x"), data.Std("x"))
        close([got["count()"], got["sum(x)"]], [len(frame), x.sum()])
        close([np.nan if got[f"{a}(x)"] is None else got[f"{a}(x)"] for a in AGGS[2:]],
              [getattr(x, a)() for a in AGGS[2:]])

    both_ways(check)


@SETTINGS
@given(source=tables(), chosen=plans(), how=st.sampled_from(["train_test_split", "split", "split_proportionately",
                                                             "split_at_indices", "streaming_split"]),
       shuffle=st.booleans())
@example(source=(pa.table({"i": list(range(30)), "k": [1] * 30, "s": ["a"] * 30, "x": [1.0] * 30, "y": [1] * 30}),
                 [10, 20]), chosen=[], how="split", shuffle=True)  # the parts of a split over a shuffle overlapped
def test_split_parts_partition_the_rows(source: tuple[pa.Table, list[int]], chosen: list[Step], how: str,
                                        shuffle: bool) -> None:
    ds, frame, ordered = run_plan(*source, chosen)
    if shuffle:
        ds, ordered = ds.random_shuffle(), False  # an unseeded shuffle: the parts must still agree
    parts = {"train_test_split": lambda: list(ds.train_test_split(test_size=0.25)),
             "split": lambda: ds.split(3),
             "split_proportionately": lambda: ds.split_proportionately([0.2, 0.5]),
             "split_at_indices": lambda: ds.split_at_indices([2, 5]),
             "streaming_split": lambda: ds.streaming_split(2)}[how]()

    def check() -> None:
        got = [p.to_pandas() for p in parts]
        rows = [i for g in got for i in (g["i"].tolist() if len(g) else [])]
        assert sorted(rows) == sorted(frame["i"].tolist()), "the parts together are the rows, each once"
        if ordered and how != "streaming_split":
            assert rows == frame["i"].tolist(), "the parts are consecutive runs of rows"

    both_ways(check)


@SETTINGS
@given(source=tables(), how=st.sampled_from(["inner", "left", "outer"]))
def test_a_join_matches_pandas(source: tuple[pa.Table, list[int]], how: str) -> None:
    table, cuts = source
    left = dataset(table, cuts).select_columns(["i", "k", "y"])
    right = dataset(table.slice(0, table.num_rows // 2), []).select_columns(["k", "x"]).rename_columns({"x": "rx"})
    lf, rf = table.to_pandas()[["i", "k", "y"]], table.slice(0, table.num_rows // 2).to_pandas()[["k", "x"]]
    expected = lf.merge(rf.rename(columns={"x": "rx"}).dropna(subset=["k"]), on="k", how=how)  # nulls never match
    if how == "outer":
        expected = expected.dropna(subset=["i"])  # right rows without a left match: compared by count below
    got_all = left.join(right, on="k", how=how).to_pandas() if table.num_rows else pd.DataFrame()
    got = got_all.dropna(subset=["i"]) if len(got_all) else got_all
    key = ["i", "rx"]
    if len(expected) == 0:
        assert len(got) == 0
        return
    a = got[["i", "k", "y", "rx"]].sort_values(key, ignore_index=True)
    b = expected[["i", "k", "y", "rx"]].sort_values(key, ignore_index=True)
    pd.testing.assert_frame_equal(a.astype(float), b.astype(float), check_dtype=False)
