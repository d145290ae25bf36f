"""Missing values (null and NaN) behave as in pandas, the same in one block and in many (issue 13, item 2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from airflowless import data

pytestmark = pytest.mark.usefixtures("cluster_client")


def in_blocks(df: pd.DataFrame, n: int) -> data.Dataset:
    size = max(1, -(-len(df) // n))
    return data.from_pandas([df.iloc[i:i + size].reset_index(drop=True) for i in range(0, len(df), size)])


def keyed(n: int = 60) -> pd.DataFrame:
    """Key ``k``: 0, 1 or missing (a third each); ``x`` with a few NaN."""
    k = [None if i % 3 == 0 else float(i % 2) for i in range(n)]
    x = [np.nan if i in (0, 3, 7) else float(i) for i in range(n)]
    return pd.DataFrame({"k": k, "x": x, "i": np.arange(n)})


@pytest.mark.parametrize("n_blocks", [1, 3])
def test_groupby_aggregates_of_the_null_key_match_pandas(n_blocks: int) -> None:
    df = keyed()
    got = in_blocks(df, n_blocks).groupby("k").aggregate(
        data.Count(), data.Count("x"), data.Sum("x"), data.Min("x"), data.Max("x"), data.Mean("x"),
        data.Std("x")).to_pandas()
    expected = df.groupby("k", dropna=False).agg(
        n=("i", "size"), c=("x", "count"), s=("x", "sum"), lo=("x", "min"), hi=("x", "max"), m=("x", "mean"),
        sd=("x", "std")).reset_index()
    assert got["k"].isna().tolist() == [False, False, True], "the null group is one group, last"
    np.testing.assert_allclose(got.iloc[:, 1:].to_numpy(dtype=float), expected.iloc[:, 1:].to_numpy(dtype=float))


def test_nan_and_null_keys_are_one_group() -> None:
    table = pa.table({"k": pa.array([1.0, None, float("nan"), 1.0, None]), "x": [1, 2, 3, 4, 5]})
    ds = data.from_arrow([table.slice(0, 2), table.slice(2)])
    got = ds.groupby("k").sum("x").to_pandas()
    assert got["k"].isna().tolist() == [False, True]
    assert got["sum(x)"].tolist() == [5, 10]


@pytest.mark.parametrize("n_blocks", [1, 2])
def test_a_key_missing_in_every_block_is_one_null_group(n_blocks: int) -> None:
    table = pa.table({"k": pa.nulls(5), "x": [1.0, 2.0, 3.0, 4.0, 5.0]})  # typed null: nothing but missing keys
    ds = data.from_arrow([table.slice(0, 2), table.slice(2)] if n_blocks == 2 else [table])
    got = ds.groupby("k").aggregate(data.Count(), data.Sum("x")).to_arrow()
    assert got.column("k").to_pylist() == [None] and got.column("count()").to_pylist() == [5]
    assert got.column("sum(x)").to_pylist() == [15.0]


@pytest.mark.parametrize("n_blocks", [1, 3])
def test_a_group_of_only_missing_values_sums_to_zero(n_blocks: int) -> None:
    df = pd.DataFrame({"k": ["a", "a", "b", "b", "b", "c"], "x": [1.0, 2.0, np.nan, None, np.nan, 5.0]})
    got = in_blocks(df, n_blocks).groupby("k").aggregate(data.Sum("x"), data.Mean("x"), data.Count("x"))
    out = got.to_pandas().set_index("k")
    expected = df.groupby("k").x.agg(["sum", "mean", "count"])
    assert out["sum(x)"].tolist() == expected["sum"].tolist() == [3.0, 0.0, 5.0]
    assert out["count(x)"].tolist() == [2, 0, 1]
    assert np.isnan(out.loc["b", "mean(x)"])


def test_aggregates_skip_nan_made_by_user_code() -> None:
    # numpy batches keep NaN as NaN (not null): the aggregates skip it as pandas does
    ds = data.range(10, parallelism=3).map_batches(
        lambda b: {"x": np.where(b["id"] % 4 == 0, np.nan, b["id"].astype(float))})
    values = pd.Series([np.nan if i % 4 == 0 else float(i) for i in range(10)])
    assert ds.sum("x") == values.sum()
    assert ds.mean("x") == pytest.approx(values.mean())
    assert ds.std("x") == pytest.approx(values.std())
    assert ds.aggregate(data.Count("x"))["count(x)"] == values.count()


def test_whole_dataset_aggregates_of_no_rows() -> None:
    empty = data.range(10).filter(expr=data.col("id") > 100)
    got = empty.aggregate(data.Count(), data.Sum("id"), data.Mean("id"), data.Max("id"))
    assert got == {"count()": 0, "sum(id)": 0, "mean(id)": None, "max(id)": None}


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("n_blocks", [1, 3])
def test_missing_sort_keys_go_last_in_both_directions(descending: bool, n_blocks: int) -> None:
    df = keyed()
    got = in_blocks(df, n_blocks).sort("k", descending=descending).to_pandas()
    expected = df.sort_values("k", ascending=not descending, kind="stable", na_position="last")
    assert got["i"].tolist() == expected["i"].tolist()


@pytest.mark.parametrize("n_blocks", [1, 3])
def test_sorting_a_text_column_with_none(n_blocks: int) -> None:
    df = pd.DataFrame({"k": ["b", None, "a", "c", None, "d", "a"], "i": range(7)})
    for descending in (False, True):
        got = in_blocks(df, n_blocks).sort("k", descending=descending).to_pandas()
        expected = df.sort_values("k", ascending=not descending, kind="stable", na_position="last")
        assert got["i"].tolist() == expected["i"].tolist()


def test_sorting_by_two_keys_with_missing_values() -> None:
    df = pd.DataFrame({"a": [1, None, 1, 2, None, 2, 1] * 3, "b": [np.nan, 2.0, 1.0, None, 3.0, 0.0, 5.0] * 3,
                       "i": range(21)})
    got = in_blocks(df, 4).sort(["a", "b"], descending=True).to_pandas()
    expected = df.sort_values(["a", "b"], ascending=False, kind="stable", na_position="last")
    assert got["i"].tolist() == expected["i"].tolist()


def test_map_groups_puts_every_null_key_row_in_one_group() -> None:
    df = keyed()
    out = in_blocks(df, 3).groupby("k").map_groups(
        lambda g: pd.DataFrame({"k": g["k"].iloc[:1], "n": [len(g)]})).to_pandas()
    assert sorted(out["n"].tolist()) == [20, 20, 20]
    assert out["k"].isna().sum() == 1


def test_unique_has_one_missing_value() -> None:
    ds = in_blocks(pd.DataFrame({"k": ["a", None, "b", None, "a"]}), 2)
    assert ds.unique("k") == ["a", "b", None]
