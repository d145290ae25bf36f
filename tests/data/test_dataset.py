"""The Dataset API on a real cluster, checked against pandas on the same data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from airflowless import data
from airflowless.datasets import add_features, make_taxi

pytestmark = pytest.mark.usefixtures("cluster_client")


@pytest.fixture(scope="module")
def taxi_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("taxi")
    make_taxi(20_000, n_files=4, path=path, seed=1)
    return str(path)


@pytest.fixture(scope="module")
def taxi_frame(taxi_dir: str) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(f) for f in sorted(Path(taxi_dir).glob("*.parquet"))], ignore_index=True)


def frame(n: int = 100) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"k": rng.integers(0, 5, n), "x": rng.normal(size=n), "i": np.arange(n)})


def blocks(df: pd.DataFrame, n: int = 4) -> data.Dataset:
    size = -(-len(df) // n)
    return data.from_pandas([df.iloc[i:i + size].reset_index(drop=True) for i in range(0, len(df), size)])


def test_the_seed_walkthrough_data_section(taxi_dir: str, taxi_frame: pd.DataFrame) -> None:
    dataset = data.read_parquet(taxi_dir)
    train, valid = dataset.train_test_split(test_size=0.3)
    train, valid = train.repartition(num_blocks=5), valid.repartition(num_blocks=5)
    assert train.schema().names == taxi_frame.columns.tolist()
    assert (train.count(), valid.count()) == (14_000, 6_000)
    assert len(train.take(5)) == 5
    means = train.groupby("passenger_count").mean("fare_amount").to_pandas()
    expected = taxi_frame.iloc[:14_000].groupby("passenger_count")["fare_amount"].mean()
    np.testing.assert_allclose(means["mean(fare_amount)"].to_numpy(), expected.to_numpy())
    assert means["passenger_count"].tolist() == expected.index.tolist()


def test_read_transform_filter_iterate(taxi_dir: str, taxi_frame: pd.DataFrame) -> None:
    ds = data.read_parquet(taxi_dir).map_batches(add_features, batch_format="pandas").filter(
        expr=data.col("trip_distance") > 0)
    expected = add_features(taxi_frame)
    expected = expected[expected.trip_distance > 0]
    total, rows = 0.0, 0
    for batch in ds.iter_batches(batch_size=1000, batch_format="numpy"):
        assert len(batch["fare_amount"]) <= 1000
        total += batch["fare_amount"].sum()
        rows += len(batch["fare_amount"])
    assert rows == len(expected) and total == pytest.approx(expected.fare_amount.sum())
    sizes = [len(b) for b in ds.iter_batches(batch_size=1000, batch_format="pandas", drop_last=True)]
    assert set(sizes) == {1000}


def test_read_with_columns_and_filter(taxi_dir: str, taxi_frame: pd.DataFrame) -> None:
    ds = data.read_parquet(taxi_dir, columns=["fare_amount", "passenger_count"],
                           filter=data.col("passenger_count") >= 3)
    got = ds.to_pandas()
    assert got.columns.tolist() == ["fare_amount", "passenger_count"]
    assert len(got) == int((taxi_frame.passenger_count >= 3).sum())


def test_row_transforms() -> None:
    df = frame(50)
    ds = blocks(df)
    assert ds.map(lambda r: {"y": r["i"] * 2}).take_all()[:3] == [{"y": 0}, {"y": 2}, {"y": 4}]
    assert ds.flat_map(lambda r: [{"i": r["i"]}] * 2).count() == 100
    assert ds.filter(lambda r: r["i"] % 2 == 0).count() == 25
    added = ds.add_column("z", lambda b: b["x"] * 2).to_pandas()
    np.testing.assert_allclose(added.z, df.x * 2)
    assert ds.drop_columns(["x"]).columns() == ["k", "i"]
    assert ds.select_columns(["i", "k"]).columns() == ["i", "k"]
    assert ds.rename_columns({"i": "idx"}).columns() == ["k", "x", "idx"]
    assert ds.limit(7).count() == 7
    assert [r["i"] for r in ds.limit(7).take_all()] == list(range(7))


def test_map_batches_formats_and_arguments() -> None:
    ds = blocks(frame(40))

    def scale(batch, factor, *, offset):  # noqa: ANN001, ANN202
        batch["i"] = batch["i"] * factor + offset
        return batch

    for fmt in ("pandas", "numpy", "pyarrow"):
        fn = scale if fmt != "pyarrow" else (lambda t, factor, offset: t.set_column(
            2, "i", __import__("pyarrow.compute").compute.add(
                __import__("pyarrow.compute").compute.multiply(t["i"], factor), offset)))
        out = ds.map_batches(fn, batch_format=fmt, fn_args=(10,), fn_kwargs={"offset": 1}, batch_size=7)
        assert sorted(out.to_pandas().i.tolist()) == [i * 10 + 1 for i in range(40)]


class Counter:
    """A stateful batch function: constructed once per worker process."""

    def __init__(self, start: int) -> None:
        import os

        self.pid = os.getpid()
        self.calls = start

    def __call__(self, batch: dict) -> dict:
        self.calls += 1
        return {"pid": np.full(len(batch["i"]), self.pid), "calls": np.full(len(batch["i"]), self.calls)}


def test_class_map_batches_keeps_state_per_worker() -> None:
    ds = data.range(400, parallelism=8).rename_columns({"id": "i"})
    out = ds.map_batches(Counter, fn_constructor_args=(100,), concurrency=2).to_pandas()
    per_pid = out.groupby("pid")["calls"].max()
    assert len(per_pid) <= 2
    assert per_pid.sum() - 100 * len(per_pid) == 8, "each of the 8 blocks called an instance once"


def test_all_to_all_operators() -> None:
    df = frame(200)
    ds = blocks(df, 5)
    assert ds.repartition(3).count() == 200
    shuffled = ds.random_shuffle(seed=3).to_pandas()
    assert sorted(shuffled.i) == list(range(200)) and shuffled.i.tolist() != list(range(200))
    assert ds.random_shuffle(seed=3).to_pandas().i.tolist() == shuffled.i.tolist(), "seeded shuffles repeat"
    ordered = ds.sort("x").to_pandas()
    assert ordered.x.tolist() == sorted(df.x)
    assert ds.sort("x", descending=True).to_pandas().x.tolist() == sorted(df.x, reverse=True)
    stats = ds.groupby("k").aggregate(data.Count(), data.Sum("x"), data.Min("x"), data.Max("x"),
                                      data.Std("x")).to_pandas()
    expected = df.groupby("k").x.agg(["count", "sum", "min", "max", "std"]).reset_index()
    np.testing.assert_allclose(stats.iloc[:, 1:].to_numpy(), expected.iloc[:, 1:].to_numpy())
    assert sorted(ds.unique("k")) == sorted(df.k.unique())
    assert ds.aggregate(data.Mean("x"))["mean(x)"] == pytest.approx(df.x.mean())
    assert ds.std("x") == pytest.approx(df.x.std())
    grouped = ds.groupby("k").map_groups(lambda g: pd.DataFrame({"k": [g.k.iloc[0]], "n": [len(g)]}))
    got = grouped.to_pandas().sort_values("k")
    assert got.n.tolist() == df.groupby("k").size().tolist()


def test_union_zip_join() -> None:
    left = blocks(frame(30), 3)
    right = data.from_pandas(pd.DataFrame({"i": np.arange(0, 60, 2), "w": np.arange(30)}))
    assert left.union(left).count() == 60
    zipped = left.zip(right).to_pandas()
    assert zipped.columns.tolist() == ["k", "x", "i", "i_1", "w"] and len(zipped) == 30
    for how, rows in (("inner", 15), ("left", 30), ("right", 30), ("outer", 45)):
        joined = left.join(right, on="i", how=how).to_pandas()
        assert len(joined) == rows, how
    with pytest.raises(ValueError, match="inner, left, right or outer"):
        left.join(right, on="i", how="cross")


def test_splits() -> None:
    ds = blocks(frame(100), 4)
    parts = ds.split(3)
    assert [p.count() for p in parts] == [34, 33, 33]
    assert [p.count() for p in ds.split(3, equal=True)] == [33, 33, 33]
    a, b, c = ds.split_at_indices([10, 55])
    assert [r["i"] for r in b.take_all()] == list(range(10, 55)) and c.count() == 45
    assert [p.count() for p in ds.split_proportionately([0.2, 0.5])] == [20, 50, 30]
    train, test = ds.train_test_split(test_size=0.25, shuffle=True, seed=0)
    assert train.count() == 75 and test.count() == 25
    assert sorted(r["i"] for r in train.take_all() + test.take_all()) == list(range(100))


def test_interop_and_consumers(tmp_path: Path) -> None:
    df = frame(30)
    ds = data.from_pandas(df)
    pd.testing.assert_frame_equal(ds.to_pandas(), df)
    assert data.from_arrow(ds.to_arrow()).count() == 30
    assert data.from_numpy(np.arange(5)).take_all()[-1] == {"data": 4}
    assert data.from_items([{"a": 1}, {"a": 2}, {"a": 3}], parallelism=2).count() == 3
    assert data.from_items([1, 2]).take_all() == [{"item": 1}, {"item": 2}]
    assert data.range(10).sum("id") == 45
    batch = ds.take_batch(4, batch_format="pandas")
    assert len(batch) == 4
    import dask.dataframe as dd

    ddf = dd.from_pandas(df, npartitions=3)
    assert data.from_dask(ddf).count() == 30
    assert len(ds.to_dask().compute()) == 30
    files = ds.write_parquet(str(tmp_path / "out"))
    assert len(files) == 1 and data.read_parquet(str(tmp_path / "out")).count() == 30
    assert "Dataset" in ds._repr_html_()
    assert ds.stats().startswith("operator")


def test_materialize_keeps_blocks_on_the_cluster() -> None:
    ds = data.range(100, parallelism=4).map_batches(lambda b: {"id": b["id"] + 1}).materialize()
    assert ds.count() == 100 and ds.sum("id") == 5050


def test_lazy_splits_are_plans_that_travel_and_match_materialized_ones() -> None:
    import cloudpickle

    ds = blocks(frame(90), 4).random_shuffle(seed=5)
    lazy_train, lazy_test = ds.train_test_split(test_size=0.3)
    travelled = cloudpickle.loads(cloudpickle.dumps(lazy_train))
    eager_train, eager_test = ds.materialize().train_test_split(test_size=0.3)
    assert [r["i"] for r in travelled.take_all()] == [r["i"] for r in eager_train.take_all()]
    assert [r["i"] for r in lazy_test.take_all()] == [r["i"] for r in eager_test.take_all()]
    assert "RowSlice" in lazy_train.explain()
    a, b = blocks(frame(10)).train_test_split(test_size=3)
    assert (a.count(), b.count()) == (7, 3)


def test_streaming_split_parts_stream_their_own_inputs(taxi_dir: str) -> None:
    ds = data.read_parquet(taxi_dir).map_batches(add_features, batch_format="pyarrow")
    parts = ds.streaming_split(2)
    assert all("ReadParquet+MapBatches(add_features)" in p.explain() for p in parts)
    counts = [p.count() for p in parts]
    assert sum(counts) == 20_000 and all(c > 0 for c in counts)
    equal = ds.streaming_split(3, equal=True)
    assert [p.count() for p in equal] == [6666] * 3


def test_split_parts_can_share_one_run_of_their_input() -> None:
    from airflowless.data.logical import operators as lo
    from airflowless.data.splits import share_split_inputs

    ds = blocks(frame(50), 3).map_batches(lambda b: b, batch_format="pandas")
    train, test = ds.train_test_split(test_size=0.2)
    shared = share_split_inputs({"train": train.map_batches(lambda b: b).plan, "test": test.plan})
    assert not any(isinstance(op, lo.RowSlice) for plan in shared.values() for op in lo.walk(plan))
    assert [r["i"] for r in data.Dataset(shared["train"]).take_all()] == list(range(40))
    assert [r["i"] for r in data.Dataset(shared["test"]).take_all()] == list(range(40, 50))
