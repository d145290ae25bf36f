"""A rank's share of a dataset: blocks on the cluster, fetched when the rank iterates.

Blocks already in the rank's worker are read from its memory; others are
fetched from the workers holding them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .._dask_internals import inform_scheduler_of_futures
from ..data import batches
from ..data.block import concat

__all__ = ["DataShard"]


@dataclass
class DataShard:
    """Rows of one dataset for one rank (``iter_batches``, ``iter_torch_batches``, ``to_pandas``)."""

    name: str
    blocks: list[Any]  # futures of pyarrow Tables
    rows: int

    def count(self) -> int:
        return self.rows

    def _tables(self, prefetch: int = 4) -> Iterator[pa.Table]:
        from distributed import Future, get_client, get_worker

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

    def iter_batches(self, *, batch_size: int | None = 256, batch_format: str = "numpy",
                     drop_last: bool = False, prefetch_batches: int = 1,
                     local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None) -> Iterator[Any]:
        """As :meth:`~airflowless.data.Dataset.iter_batches` (``prefetch_batches``: blocks are fetched four
        at a time)."""
        yield from batches.iter_batches(self._tables(), batch_size=batch_size, batch_format=batch_format,
                                        drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
                                        local_shuffle_seed=local_shuffle_seed)

    def iter_torch_batches(self, *, batch_size: int | None = 256, dtypes: Any = None, device: str | None = None,
                           drop_last: bool = False, collate_fn: Callable[[dict[str, Any]], Any] | None = None,
                           prefetch_batches: int = 1, local_shuffle_buffer_size: int | None = None,
                           local_shuffle_seed: int | None = None) -> Iterator[Any]:
        """As :meth:`~airflowless.data.Dataset.iter_torch_batches`."""
        yield from batches.iter_torch_batches(
            self.iter_batches(batch_size=batch_size, drop_last=drop_last,
                              local_shuffle_buffer_size=local_shuffle_buffer_size,
                              local_shuffle_seed=local_shuffle_seed),
            dtypes=dtypes, device=device, collate_fn=collate_fn)

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        for table in self._tables():
            yield from table.to_pylist()

    def to_arrow(self) -> pa.Table:
        return concat(list(self._tables()))

    def to_pandas(self) -> Any:
        return self.to_arrow().to_pandas()
