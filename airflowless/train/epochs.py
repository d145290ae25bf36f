"""A training dataset shuffled afresh each epoch, across all ranks, as Ray Train does with ``random_shuffle()``.

Ray re-runs a training dataset's plan each time a rank iterates its shard, so a
``random_shuffle()`` without a seed gives every epoch a new global order. Here
a fit prepares its datasets once; for a dataset whose last operation is such a
shuffle, the fit keeps the shuffle's *input* on the cluster instead
(:class:`EpochShuffled`), and each rank's shard (:class:`EpochShuffle`) makes
the shuffle of each epoch when the rank starts iterating it:

- epoch 0 uses the dataset's own seed (the order ``ds.take_all()`` gives);
  epoch ``e`` a seed derived from it and ``e``;
- every rank submits the same tasks under the same keys, so Dask runs each
  once and the ranks share the result: rows move between ranks each epoch,
  and in each epoch every row goes to exactly one rank;
- rank ``r`` of ``n`` takes rows ``[total * r // n, total * (r + 1) // n)`` of
  the shuffled order: the same count every epoch; where the backend needs
  exactly equal shares (Torch's lock-step collectives), ``total // n`` rows
  each, the last ``total % n`` rows of each epoch's order going unused, as
  when the blocks are cut evenly without a shuffle.

Each rank counts its own epochs (its iterations of the shard), so the ranks
must iterate their shards the same number of times, as Ray's split of a
dataset among ranks also asks: a rank that iterates once more (a check of its
own on its rows) reads the next epoch's share, which overlaps the others'.
A rank that reaches an epoch after every other rank has read and let go of
its parts makes them again (the same rows, at the cost of the shuffle's work
once more). A restarted fit (``FailureConfig``, ``Trainer.restore``) starts
again at epoch 0's order. A shuffle with a seed the user gave keeps one order for the
whole fit (today's behaviour, and what a seeded Ray dataset gives too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = ["EpochShuffle", "EpochShuffled", "epoch_seed"]


@dataclass(frozen=True)
class EpochShuffled:
    """A prepared dataset to shuffle per epoch: its input's blocks (kept on the cluster) and the shuffle."""

    blocks: tuple[Any, ...]  # futures of the input's pyarrow Tables
    rows: tuple[int, ...]
    seed: int
    num_blocks: int | None

    def shard(self, rank: int, world: int, *, equal: bool = False) -> EpochShuffle:
        return EpochShuffle(self.blocks, sum(self.rows), self.seed, self.num_blocks or len(self.blocks), rank, world,
                            equal)


def epoch_seed(seed: int, epoch: int) -> int:
    """The shuffle seed of ``epoch``: the dataset's own for epoch 0."""
    if epoch == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}:{epoch}".encode()).digest()[:4], "big") >> 1


@dataclass(frozen=True)
class EpochShuffle:
    """One rank's rows of each epoch's shuffle (iterating it again is the next epoch)."""

    inputs: tuple[Any, ...]
    total: int
    seed: int
    parts: int  # output blocks of each epoch's shuffle
    rank: int
    world: int
    equal: bool = False  # exactly total // world rows for every rank

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inputs)  # the blocks it is made from (a fit's layout token hashes their keys)

    @property
    def bounds(self) -> tuple[int, int]:
        """Which rows of each epoch's order are this rank's: ``[start, stop)``."""
        if self.equal:
            share = self.total // self.world
            return share * self.rank, share * (self.rank + 1)
        return self.total * self.rank // self.world, self.total * (self.rank + 1) // self.world

    @property
    def rows(self) -> int:
        start, stop = self.bounds
        return stop - start

    def tables(self, epoch: int, client: Any) -> Iterator[pa.Table]:
        """This rank's rows of ``epoch``, as the shuffled blocks that hold them (sliced at the ends)."""
        from distributed import get_worker

        try:
            local = get_worker().data
        except ValueError:  # not in a worker (a test calling it from the driver)
            local = {}
        outputs, counts = self._submit(epoch, client)
        start, stop = self.bounds
        mine, offset = [], 0  # (future, first row, rows) of the parts that hold this rank's rows
        for future, count in zip(outputs, counts, strict=True):
            lo, hi = max(start, offset), min(stop, offset + count)
            if lo < hi:
                mine.append((future, lo - offset, hi - lo))
            offset += count
        del outputs  # the other parts are the other ranks' to hold
        while mine:
            future, first, rows = mine.pop(0)  # held no longer than it is read
            table: pa.Table = local[future.key] if future.key in local else future.result()
            del future
            yield table.slice(first, rows)

    def _submit(self, epoch: int, client: Any) -> tuple[list[Any], list[int]]:
        """The epoch's output blocks (futures) and their row counts, under keys every rank shares."""
        from distributed import Future

        from .._dask_internals import inform_scheduler_of_futures
        from ..data.physical import tasks

        seed = epoch_seed(self.seed, epoch)
        token = hashlib.sha256(repr((sorted(str(b.key) for b in self.inputs), self.seed, self.parts)).encode())
        prefix = f"epoch-shuffle-{token.hexdigest()[:16]}-{epoch}"
        inputs: list[Any] = [Future(block.key, client=client) for block in self.inputs]
        inform_scheduler_of_futures(client)
        splits = [client.submit(tasks.split_random, block, self.parts, seed * 7919 + i, key=f"{prefix}-split-{i}")
                  for i, block in enumerate(inputs)]
        outputs = [client.submit(tasks.concat_shuffled, seed * 104729 + j,
                                 *[client.submit(tasks.pick, split, j, key=f"{prefix}-pick-{i}-{j}")
                                   for i, split in enumerate(splits)],
                                 key=f"{prefix}-out-{j}")
                   for j in range(self.parts)]
        counts = client.gather([client.submit(_num_rows, out, key=f"{prefix}-rows-{j}") for j, out in enumerate(outputs)])
        return outputs, counts


def _num_rows(table: pa.Table) -> int:
    return table.num_rows
