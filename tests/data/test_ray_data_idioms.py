"""Ray Data idioms that port by changing the import (issue 29 item 8), on the session's real cluster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflowless import data
from airflowless.data.aggregate import Max, Mean, Sum
from airflowless.data.transforms import UserCodeError
from airflowless.errors import ConfigError


def test_filter_takes_ray_s_text_expressions_and_arithmetic_on_col(tmp_path: Path) -> None:
    ds = data.range(10, parallelism=3)
    assert [r["id"] for r in ds.filter(expr="id <= 4").take_all()] == [0, 1, 2, 3, 4]
    assert [r["id"] for r in ds.filter(expr=data.col("id") % 2 == 0).take_all()] == [0, 2, 4, 6, 8]
    assert [r["id"] for r in ds.filter(expr="id % 3 == 1 and not id in [4]").take_all()] == [1, 7]
    assert [r["id"] for r in ds.filter(expr=(data.col("id") * 2 + 1 > 15) | (data.col("id") == 0)).take_all()] \
        == [0, 8, 9]
    with pytest.raises(ConfigError, match="cannot use"):
        ds.filter(expr="__import__('os').system('true')")
    pq.write_table(pa.table({"trip_distance": [0.0, 1.5, -1.0, 3.0]}), tmp_path / "t.parquet")
    read = data.read_parquet(str(tmp_path)).filter(expr="trip_distance > 0")  # pushed into the read
    assert "filter=" in read.explain() and read.count() == 2
    assert data.read_parquet(str(tmp_path), filter="trip_distance > 2").count() == 1


def test_a_filter_on_a_column_that_a_later_selection_drops_runs() -> None:
    ds = data.from_arrow(pa.table({"1x": [1, 2, 3], "a b": [0, 5, 5], "v": [10, 20, 30]}))
    kept = ds.filter(expr=(data.col("1x") > 1) & (data.col("a b") == 5)).select_columns(["v"])
    assert kept.take_all() == [{"v": 20}, {"v": 30}]  # ColumnNotFoundError when the selection moved below


def test_aggregations_take_alias_name_and_ignore_nulls() -> None:
    ds = data.from_pandas(pd.DataFrame({"k": [1, 1, 2, 2], "x": [1.0, None, 2.0, 4.0]}))
    assert ds.aggregate(Sum("x", alias_name="total"), Max("x")) == {"total": 7.0, "max(x)": 4.0}
    kept = ds.aggregate(Mean("x", ignore_nulls=False))
    assert kept["mean(x)"] is None or np.isnan(kept["mean(x)"])  # a null makes the result null, as in Ray
    assert ds.sum("x", ignore_nulls=False) is None and ds.sum("x") == 7.0
    by_key = ds.groupby("k").aggregate(Sum("x", ignore_nulls=False, alias_name="s")).to_pandas()
    assert by_key["s"].isna().tolist() == [True, False] and by_key["s"].tolist()[1] == 6.0


def test_size_bytes_and_input_files(tmp_path: Path) -> None:
    for i in range(3):
        pq.write_table(pa.table({"x": np.arange(100, dtype="int64") + i}), tmp_path / f"part-{i}.parquet")
    ds = data.read_parquet(str(tmp_path))
    assert sorted(Path(f).name for f in ds.input_files()) == ["part-0.parquet", "part-1.parquet", "part-2.parquet"]
    assert ds.map_batches(lambda b: b).input_files() == ds.input_files()
    assert 3 * 100 * 8 <= ds.size_bytes() <= 3 * 100 * 9  # the values and, if read with one, a validity bitmap
    assert data.range(5).input_files() == []


def test_join_with_ray_s_signature() -> None:
    left = data.from_pandas(pd.DataFrame({"id": [1, 2, 3], "a": ["x", "y", "z"]}))
    right = data.from_pandas(pd.DataFrame({"key": [2, 3, 4], "b": [20, 30, 40]}))
    inner = left.join(right, join_type="inner", on=("id",), right_on=("key",), num_partitions=2).to_pandas()
    assert sorted(inner["id"]) == [2, 3]
    outer = left.join(right, join_type="left_outer", on=("id",), right_on=("key",)).to_pandas()
    assert sorted(outer["id"]) == [1, 2, 3]
    with pytest.raises(ConfigError, match="join_type"):
        left.join(right, join_type="sideways", on=("id",))


def test_stats_are_those_of_the_dataset_they_are_called_on() -> None:
    first = data.range(100, parallelism=4).map_batches(lambda b: b)
    second = data.range(10, parallelism=2)
    assert "nothing has run yet" in str(first.stats())  # Ray's: stats() runs nothing
    first.materialize()
    second.count()
    assert "MapBatches" in str(first.stats())  # not the later execution of `second`


def test_map_batches_concurrency_ranges_and_batch_formats() -> None:
    ds = data.range(20, parallelism=4)
    doubled = ds.map_batches(lambda b: {"id": b["id"] * 2}, concurrency=(1, 2), batch_format="default")
    assert sorted(r["id"] for r in doubled.take_all()) == list(range(0, 40, 2))
    pooled = ds.map_batches(lambda b: b, compute=data.ActorPoolStrategy(min_size=1, max_size=2))
    assert pooled.count() == 20
    with pytest.raises(ConfigError, match="concurrency"):
        ds.map_batches(lambda b: b, concurrency=(3, 1))

    def write_in_place(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch["id"] += 1
        return batch
    assert sorted(r["id"] for r in ds.map_batches(write_in_place, zero_copy_batch=False).take_all()) == \
        list(range(1, 21))
    with pytest.raises(UserCodeError, match="zero_copy_batch=True the batch's arrays are read-only"):
        ds.map_batches(write_in_place, zero_copy_batch=True).take_all()


def test_iter_batches_with_a_local_shuffle_buffer_and_a_collate_fn() -> None:
    ds = data.range(100, parallelism=4)
    in_order = [b["id"].tolist() for b in ds.iter_batches(batch_size=10)]
    mixed = [b["id"].tolist() for b in ds.iter_batches(batch_size=10, local_shuffle_buffer_size=30,
                                                        local_shuffle_seed=1, prefetch_batches=4)]
    assert sorted(x for b in mixed for x in b) == list(range(100)) and mixed != in_order
    assert all(len(b) == 10 for b in mixed)
    again = [b["id"].tolist() for b in ds.iter_batches(batch_size=10, local_shuffle_buffer_size=30,
                                                       local_shuffle_seed=1)]
    assert again == mixed  # a seed fixes the draws
    collated = list(ds.iter_torch_batches(batch_size=25, collate_fn=lambda b: float(b["id"].sum())))
    assert collated == [300.0, 925.0, 1550.0, 2175.0]
    with pytest.raises(ConfigError, match="collate_fn= or dtypes="):
        next(iter(ds.iter_torch_batches(collate_fn=lambda b: b, device="cuda")))


def test_a_training_shard_iterates_rows_and_shuffled_torch_batches() -> None:
    from airflowless import train
    from airflowless.train import ScalingConfig
    from airflowless.train.torch import TorchTrainer

    def loop(config: dict) -> None:
        shard = train.get_dataset_shard("train")
        rows = sum(1 for _ in shard.iter_rows())
        seen = [int(x) for batch in shard.iter_torch_batches(batch_size=8, local_shuffle_buffer_size=16,
                                                             collate_fn=lambda b: b["id"].tolist())
                for x in batch]
        train.report({"rows": rows, "sum": sum(seen), "shuffled": seen != sorted(seen)})

    result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                          datasets={"train": data.range(64, parallelism=4)}).fit()
    assert result.metrics["rows"] == 64 and result.metrics["sum"] == sum(range(64)) and result.metrics["shuffled"]


def test_data_config_gives_every_rank_the_whole_of_the_datasets_it_does_not_split() -> None:
    # Ray: TorchTrainer(..., datasets={"train": ..., "valid": ...}, dataset_config=DataConfig(datasets_to_split=["train"]))
    from airflowless import train
    from airflowless.train import DataConfig, ScalingConfig
    from airflowless.train.torch import TorchTrainer

    def loop(config: dict) -> None:
        train.report({"train": train.get_dataset_shard("train").count(),
                      "valid": train.get_dataset_shard("valid").count()})

    datasets = {"train": data.range(40, parallelism=4), "valid": data.range(10, parallelism=2)}
    result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2), datasets=datasets,
                          dataset_config=DataConfig(datasets_to_split=["train"])).fit()
    assert (result.metrics["train"], result.metrics["valid"]) == (20, 10)  # rank 0: half of train, all of valid
    with pytest.raises(ConfigError, match="not among the trainer's datasets"):
        TorchTrainer(loop, datasets=datasets, dataset_config=DataConfig(datasets_to_split=["test"]))


def test_expressions_take_literals_on_either_side() -> None:
    from airflowless.data.expressions import to_arrow

    table = pa.table({"id": [1, 2, 3, 4, 5]})
    picked = {text: table.filter(to_arrow(text))["id"].to_pylist()
              for text in ["10 - id > 7", "2 * id >= 8", "12 / id > 5", "7 % id == 1", "-id < -3"]}
    assert picked == {"10 - id > 7": [1, 2], "2 * id >= 8": [4, 5], "12 / id > 5": [1, 2], "7 % id == 1": [2, 3],
                      "-id < -3": [4, 5]}
    assert table.filter(to_arrow(1 + data.col("id") * 2 > 8))["id"].to_pylist() == [4, 5]


def test_take_counts_as_a_run_of_the_dataset() -> None:
    ds = data.range(10, parallelism=2)
    ds.take(3)
    assert "nothing has run yet" not in str(ds.stats())
