"""Iterating a Dataset or a training shard in batches: the options Ray's ``iter_batches`` and
``iter_torch_batches`` take, for both (one implementation, so the two cannot drift apart).

``local_shuffle_buffer_size=n`` (Ray's) fills a buffer of at least ``n`` rows
and draws each batch at random from it, so rows are mixed across block
boundaries without a full shuffle; ``local_shuffle_seed=`` fixes the draws.
``collate_fn`` turns each numpy batch into what a training step takes.

>>> import pyarrow as pa
>>> tables = iter([pa.table({"x": list(range(0, 5))}), pa.table({"x": list(range(5, 10))})])
>>> sorted(x for b in iter_batches(tables, batch_size=4, local_shuffle_buffer_size=6, local_shuffle_seed=0)
...        for x in b["x"].tolist())
[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ConfigError
from .block import check_format, concat, numpy_batches, rebatch, to_batch

__all__ = ["BatchIterable", "iter_batches", "iter_torch_batches"]


class BatchIterable:
    """``iter_rows``, ``iter_batches`` and ``iter_torch_batches`` over the tables :meth:`_iteration_tables` gives
    (a Dataset's blocks as its plan makes them, a training shard's as it fetches them)."""

    def _iteration_tables(self) -> Iterator[pa.Table]:
        raise NotImplementedError

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        for table in self._iteration_tables():
            yield from table.to_pylist()

    def iter_batches(self, *, batch_size: int | None = 256, batch_format: str = "numpy",
                     drop_last: bool = False, prefetch_batches: int = 1,
                     local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None) -> Iterator[Any]:
        """Batches of ``batch_size`` rows (across block boundaries), in order, or drawn at random from a
        buffer of ``local_shuffle_buffer_size`` rows (see the module). ``prefetch_batches`` is Ray's and is
        accepted: a Dataset's executor keeps a window of blocks in flight, a shard fetches four at a time."""
        yield from iter_batches(self._iteration_tables(), batch_size=batch_size, batch_format=batch_format,
                                drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
                                local_shuffle_seed=local_shuffle_seed)

    def iter_torch_batches(self, *, batch_size: int | None = 256, dtypes: Any = None,
                           device: str | None = None, drop_last: bool = False,
                           collate_fn: Callable[[dict[str, Any]], Any] | None = None, prefetch_batches: int = 1,
                           local_shuffle_buffer_size: int | None = None,
                           local_shuffle_seed: int | None = None) -> Iterator[Any]:
        """Batches as dicts of torch tensors, or what ``collate_fn(numpy_batch)`` makes of them."""
        yield from iter_torch_batches(
            self.iter_batches(batch_size=batch_size, drop_last=drop_last,
                              local_shuffle_buffer_size=local_shuffle_buffer_size,
                              local_shuffle_seed=local_shuffle_seed),
            dtypes=dtypes, device=device, collate_fn=collate_fn)


def iter_batches(tables: Iterator[pa.Table], *, batch_size: int | None = 256, batch_format: str = "numpy",
                 drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
                 local_shuffle_seed: int | None = None) -> Iterator[Any]:
    """``tables`` re-cut into batches of ``batch_size`` rows in ``batch_format`` (see the module)."""
    batch_format = check_format(batch_format)
    if batch_size is not None:
        try:
            batch_size = operator.index(batch_size)  # a numpy integer too
        except TypeError:
            batch_size = 0
        if batch_size < 1:
            raise ConfigError(f"batch_size is a number of rows >= 1 (or None: whole blocks), got {batch_size!r}")
    if local_shuffle_buffer_size is not None:
        if isinstance(local_shuffle_buffer_size, bool) or not isinstance(local_shuffle_buffer_size, int) \
                or local_shuffle_buffer_size < 1:
            raise ConfigError(f"local_shuffle_buffer_size is a number of rows >= 1, got {local_shuffle_buffer_size!r}")
        if batch_size is None:
            raise ConfigError("local_shuffle_buffer_size needs a batch_size (rows are drawn into batches of it)")
        tables = _shuffled(tables, batch_size, local_shuffle_buffer_size, np.random.default_rng(local_shuffle_seed))
    elif batch_format == "numpy" and batch_size is not None:
        yield from numpy_batches(tables, batch_size, drop_last=drop_last)
        return
    for table in rebatch(tables, batch_size, drop_last=drop_last):
        yield to_batch(table, batch_format)


def _shuffled(tables: Iterator[pa.Table], batch_size: int, buffer_size: int,
              rng: np.random.Generator) -> Iterator[pa.Table]:
    """Batches of ``batch_size`` rows drawn at random from a buffer kept at ``buffer_size`` rows or more.

    Each time rows come in, the buffer is shuffled once and every batch it can
    give while keeping ``buffer_size`` rows is cut from its front (one copy of
    the buffer per incoming block, not one per batch).
    """
    buffer = None
    for table in tables:
        buffer = table if buffer is None else concat([buffer, table])
        batches = (buffer.num_rows - buffer_size) // batch_size
        if batches > 0:
            buffer = buffer.take(pa.array(rng.permutation(buffer.num_rows)))
            for start in range(0, batches * batch_size, batch_size):
                yield buffer.slice(start, batch_size)
            buffer = buffer.slice(batches * batch_size)
    if buffer is not None and buffer.num_rows:
        yield buffer.take(pa.array(rng.permutation(buffer.num_rows)))  # the rest, in a random order


def iter_torch_batches(batches: Iterator[dict[str, np.ndarray]], *, dtypes: Any = None, device: str | None = None,
                       collate_fn: Callable[[dict[str, np.ndarray]], Any] | None = None) -> Iterator[Any]:
    """Numpy ``batches`` as dicts of torch tensors (``dtypes``: one dtype or one per column), or as
    ``collate_fn(batch)`` returns them (Ray's: then ``dtypes`` and ``device`` are yours to apply)."""
    if collate_fn is not None:
        if dtypes is not None or device not in (None, "cpu"):
            raise ConfigError("iter_torch_batches takes collate_fn= or dtypes=/device=, not both: the collate "
                              "function makes the tensors, so it sets their types and device")
        for batch in batches:
            yield collate_fn(batch)
        return
    import torch

    for batch in batches:
        yield {name: torch.as_tensor(np.require(values, requirements="W"),
                                     dtype=dtypes.get(name) if isinstance(dtypes, dict) else dtypes,
                                     device=device or "cpu")
               for name, values in batch.items()}
