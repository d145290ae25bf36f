"""Dataset.random_sample and Dataset.num_blocks on the real embedded cluster."""

from __future__ import annotations

import pytest

from airflowless import data

pytestmark = pytest.mark.usefixtures("cluster_client")


def ids(ds: data.Dataset) -> list[int]:
    return sorted(int(i) for i in ds.to_pandas()["id"])


def test_random_sample_keeps_about_the_fraction_the_same_rows_for_a_seed() -> None:
    base = data.range(4000, parallelism=4)
    sample = ids(base.random_sample(0.25, seed=3))
    assert 800 < len(sample) < 1200  # 1000 expected; 6 standard deviations is ~165
    assert len(set(sample)) == len(sample) and set(sample) <= set(range(4000))
    assert ids(base.random_sample(0.25, seed=3)) == sample
    assert ids(base.random_sample(0.25, seed=4)) != sample
    assert base.random_sample(0.0, seed=1).count() == 0 and base.random_sample(1.0, seed=1).count() == 4000


def test_a_seedless_sample_is_fixed_when_the_plan_is_built() -> None:
    sampled = data.range(2000, parallelism=4).random_sample(0.5)
    assert ids(sampled) == ids(sampled)  # re-reading the same Dataset gives the same rows
    again = data.range(2000, parallelism=4).random_sample(0.5)
    assert ids(again) != ids(sampled)  # a new call draws a new seed


def test_random_sample_rejects_a_fraction_outside_0_1() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        data.range(10).random_sample(1.5)


def test_num_blocks_counts_the_blocks_read_or_materialized() -> None:
    ds = data.range(100, parallelism=4)
    assert ds.num_blocks() == 4
    assert ds.materialize().num_blocks() == 4
    assert ds.repartition(3).num_blocks() == 3
