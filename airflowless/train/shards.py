"""A rank's share of a dataset: blocks on the cluster, fetched when the rank iterates.

Blocks already in the rank's worker are read from its memory; others are
fetched from the workers holding them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .._dask_internals import inform_scheduler_of_futures
from ..data import batches
from ..data.block import concat
from .epochs import EpochShuffle

__all__ = ["DataShard"]


@dataclass
class DataShard(batches.BatchIterable):
    """Rows of one dataset for one rank (``iter_batches``, ``iter_torch_batches``, ``to_pandas``)."""

    name: str
    blocks: list[Any] | EpochShuffle  # futures of pyarrow Tables, or a shuffle made again each epoch
    rows: int
    _epoch: int = field(default=0, init=False)  # iterations so far (each one an epoch)

    def count(self) -> int:
        return self.rows

    def _tables(self, prefetch: int = 4) -> Iterator[pa.Table]:
        from distributed import Future, get_client, get_worker

        if isinstance(self.blocks, EpochShuffle):
            epoch, self._epoch = self._epoch, self._epoch + 1
            yield from self.blocks.tables(epoch, get_client())
            return
        try:
            local = get_worker().data
        except ValueError:
            local = {}
        keys = [block.key for block in self.blocks]
        client = None
        for start in range(0, len(keys), prefetch):
            chunk = keys[start:start + prefetch]
            remote = [k for k in chunk if k not in local]
            fetched: dict[Any, pa.Table] = {}
            if remote:
                client = client or get_client()
                # The futures belong to the driver's client: fetch the keys through this
                # process's client, which must tell the scheduler it wants them (as
                # Client.get_dataset does) or it never hears that they are in memory.
                futures: list[Any] = [Future(k, client=client) for k in remote]
                inform_scheduler_of_futures(client)
                fetched = dict(zip(remote, client.gather(futures), strict=True))
            for key in chunk:
                yield local[key] if key in local else fetched[key]

    def _iteration_tables(self) -> Iterator[pa.Table]:
        return self._tables()  # iter_rows, iter_batches, iter_torch_batches: see data.batches

    def to_arrow(self) -> pa.Table:
        return concat(list(self._tables()))

    def to_pandas(self) -> Any:
        return self.to_arrow().to_pandas()
