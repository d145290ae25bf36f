"""The parts of a split partition the same rows, whatever randomness ran before the split (issue 13, item 1)."""

from __future__ import annotations

import gc

import cloudpickle
import numpy as np
import pytest

from airflowless import data
from airflowless.data.execution import shared
from airflowless.data.splits import share_split_inputs

pytestmark = pytest.mark.usefixtures("cluster_client")

N = 1000


def ids(ds: data.Dataset) -> list[int]:
    return ds.to_pandas()["id"].tolist()


def assert_partition(parts: list[data.Dataset], universe: set[int] | None = None) -> list[list[int]]:
    """Every part read twice gives the same rows; no row is in two parts; together they are ``universe``."""
    first = [ids(p) for p in parts]
    assert [ids(p) for p in parts] == first, "a part gave other rows when read again"
    seen: list[int] = [i for rows in first for i in rows]
    assert len(seen) == len(set(seen)), f"{len(seen) - len(set(seen))} rows are in two parts"
    if universe is not None:
        assert set(seen) == universe, f"{len(universe - set(seen))} rows are in no part"
    return first


def shuffled() -> data.Dataset:
    return data.range(N, parallelism=4).random_shuffle()


def test_train_test_split_of_an_unseeded_shuffle_partitions_the_rows() -> None:
    train, test = shuffled().train_test_split(test_size=0.2)
    got = assert_partition([train, test], set(range(N)))
    assert len(got[1]) == 200
    assert got[0] + got[1] != list(range(N)), "the rows were shuffled"


@pytest.mark.parametrize("how", ["split", "split_equal", "split_proportionately", "split_at_indices",
                                 "streaming_split"])
def test_every_split_of_an_unseeded_shuffle_partitions_the_rows(how: str) -> None:
    ds = shuffled()
    parts = {
        "split": lambda: ds.split(2),
        "split_equal": lambda: ds.split(3, equal=True),
        "split_proportionately": lambda: ds.split_proportionately([0.3, 0.3]),
        "split_at_indices": lambda: ds.split_at_indices([100, 700]),
        "streaming_split": lambda: ds.streaming_split(2),
    }[how]()
    universe = None if how == "split_equal" else set(range(N))
    got = assert_partition(parts, universe)
    if how == "split_equal":
        assert [len(p) for p in got] == [N // 3] * 3


def test_a_shuffling_repartition_before_a_split_partitions_the_rows() -> None:
    parts = data.range(N, parallelism=4).repartition(3, shuffle=True).split(2)
    assert_partition(parts, set(range(N)))


def keep_at_random(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """User code that draws random numbers without a seed: keeps about half the rows, adds noise."""
    keep = np.random.random(len(batch["id"])) < 0.5
    return {"id": batch["id"][keep], "noise": np.random.random(int(keep.sum()))}


def test_a_split_after_a_random_map_batches_partitions_one_run_of_it() -> None:
    ds = data.range(N, parallelism=4).map_batches(keep_at_random)
    train, test = ds.train_test_split(test_size=0.25)
    got = assert_partition([train, test])
    total = len(got[0]) + len(got[1])
    assert 0 < total < N
    assert len(got[1]) == total - int(round(total * 0.75)), "the test part is the last quarter of one run"
    noise = {tuple(r) for p in (train, test) for r in p.to_pandas()[["id", "noise"]].itertuples(index=False)}
    assert len(noise) == total, "a row's random values are the same in every read"


def test_a_split_after_a_random_sort_key_partitions_the_rows() -> None:
    ds = data.range(N, parallelism=4).map_batches(lambda b: {**b, "r": np.random.random(len(b["id"]))})
    parts = ds.sort("r").split(3)
    assert_partition(parts, set(range(N)))


def test_a_part_stopped_early_leaves_the_other_parts_whole() -> None:
    train, test = shuffled().train_test_split(test_size=0.5)
    assert len(test.take(1)) == 1  # stops early: cancels what it submitted, never the kept input
    assert train.count() + test.count() == N
    assert_partition([train, test], set(range(N)))


def test_a_materialized_dataset_survives_a_consumer_that_stops_early() -> None:
    materialized = data.range(100, parallelism=8).materialize()
    assert materialized.take(1) == [{"id": 0}]
    assert materialized.count() == 100


def test_an_unseeded_shuffle_has_its_seed_when_the_plan_is_built() -> None:
    ds = shuffled()
    assert ids(ds) == ids(ds), "one Dataset, one order"
    assert ids(shuffled()) != ids(ds), "a new random_shuffle() call, a new order"


def test_parts_sent_to_another_process_still_partition_a_shuffled_plan() -> None:
    # A part unpickled elsewhere runs its input again (nothing is kept there): the seed fixed
    # when the plan was built makes that run give the same rows.
    train, test = shuffled().split_proportionately([0.5])
    travelled = [cloudpickle.loads(cloudpickle.dumps(p)) for p in (train, test)]
    shared._ENTRIES.clear()  # as in a process that never registered the split
    assert_partition(travelled, set(range(N)))


def test_a_trainer_cuts_its_splits_from_the_rows_the_user_already_read() -> None:
    ds = data.range(N, parallelism=4).map_batches(keep_at_random)
    train, valid = ds.train_test_split(test_size=0.3)
    seen = ids(valid)
    plans = share_split_inputs({"train": train.plan, "valid": valid.plan})
    assert ids(data.Dataset(plans["valid"])) == seen
    assert not set(ids(data.Dataset(plans["train"]))) & set(seen)


def test_the_kept_input_is_released_with_the_last_part() -> None:
    train, test = shuffled().split(2)
    assert train.count() + test.count() == N
    before = len(shared._ENTRIES)
    del train, test
    gc.collect()
    assert len(shared._ENTRIES) == before - 1
