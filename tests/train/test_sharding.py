"""Dividing a dataset's blocks among ranks (train.sharding), on blocks placed on chosen workers."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from airflowless import _dask_internals as internals
from airflowless.data.logical.operators import FromBlocks
from airflowless.train.sharding import BALANCE, assign_shards


def _blocks(client: Any, sizes_on: list[tuple[int, str]]) -> FromBlocks:
    """A materialized plan with a block of ``size`` rows held by each given worker."""
    futures, rows, start = [], [], 0
    for size, worker in sizes_on:
        table = pa.table({"x": list(range(start, start + size))})
        futures.append(client.scatter(table, workers=[worker], hash=False))
        rows.append(size)
        start += size
    return FromBlocks(tuple(futures), tuple(rows), "Materialized")


def _values(client: Any, blocks: list[Any]) -> list[int]:
    return [v for table in client.gather(blocks) for v in table.column("x").to_pylist()]


def test_blocks_held_unevenly_are_balanced_and_stay_local_while_they_fit(cluster_client: Any) -> None:
    first, second = internals.worker_addresses(cluster_client)
    plan = _blocks(cluster_client, [(1_000, first)] * 11 + [(1_000, second)] * 5)
    shards = assign_shards(cluster_client, {"train": plan}, [first, second], equal=False)
    (blocks0, rows0), (blocks1, rows1) = shards[0]["train"], shards[1]["train"]
    assert rows0 == rows1 == 8_000  # not 11,000 / 5,000, nor a locality-first 9,000 / 7,000
    held = cluster_client.who_has(list(plan.blocks))
    assert all(first in held[b.key] for b in blocks0)  # rank 0 trains on its own worker's blocks only
    assert sorted(_values(cluster_client, blocks0 + blocks1)) == list(range(16_000))  # every row once


def test_blocks_that_cannot_be_balanced_whole_are_cut_evenly(cluster_client: Any) -> None:
    first, second = internals.worker_addresses(cluster_client)
    plan = _blocks(cluster_client, [(1_000, first), (1_000, first), (500, second)])
    shards = assign_shards(cluster_client, {"train": plan}, [first, second], equal=False)
    rows = [shard["train"][1] for shard in shards]
    assert max(rows) <= 1_250 * (1 + BALANCE) and sum(rows) == 2_500, rows
    together = _values(cluster_client, shards[0]["train"][0] + shards[1]["train"][0])
    assert sorted(together) == list(range(2_500))
