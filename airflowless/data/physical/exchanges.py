"""All-to-all exchanges run by :class:`~.operators.BarrierOp`: from all input blocks to new blocks.

Each exchange is ``exchange(ex, op, *inputs, **params) -> list of output futures``
and only submits tasks (see :mod:`.tasks`); the data never passes through the
driver, only small metadata (row counts, key samples).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..block import concat
from ..nulls import missing_as_null
from . import tasks

if TYPE_CHECKING:
    from ..execution.executor import Execution
    from .operators import PhysicalOp

__all__ = ["row_slice", "repartition", "random_shuffle", "sort", "aggregate", "map_groups", "join", "zip_"]


def _split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def slice_plan(counts: list[int], sizes: list[int]) -> list[list[tuple[int, int, int]]]:
    """For each output size, the (block, start, stop) slices of the inputs that make it up."""
    plan: list[list[tuple[int, int, int]]] = []
    block, offset = 0, 0
    for size in sizes:
        pieces: list[tuple[int, int, int]] = []
        need = size
        while need > 0:
            while counts[block] - offset == 0:
                block, offset = block + 1, 0
            take = min(need, counts[block] - offset)
            pieces.append((block, offset, offset + take))
            offset += take
            need -= take
        plan.append(pieces)
    return plan


def _gather(ex: Execution, op: PhysicalOp, blocks: list[Any], plan: list[list[tuple[int, int, int]]]) -> list[Any]:
    outputs = []
    for pieces in plan:
        args: list[Any] = []
        for block, start, stop in pieces or [(0, 0, 0)]:  # an empty output keeps the columns
            args += [blocks[block], start, stop]
        outputs.append(ex.submit(op, tasks.gather_slices, *args))
    return outputs


def row_slice(ex: Execution, op: PhysicalOp, blocks: list[Any], *, spec: Any, part: int) -> list[Any]:
    counts = [rows for rows, _ in ex.metas(blocks)]
    bounds = spec.bounds(sum(counts))
    start, stop = bounds[part], bounds[part + 1]
    pieces = slice_plan(counts, [start, stop - start])[1] if stop > start else []
    outputs = []
    for block, a, b in pieces:
        outputs.append(blocks[block] if (a, b) == (0, counts[block]) else
                       ex.submit(op, tasks.slice_block, blocks[block], a, b))
    return outputs


def repartition(ex: Execution, op: PhysicalOp, blocks: list[Any], *, num_blocks: int, shuffle: bool,
                seed: int | None = None) -> list[Any]:
    if shuffle:
        return random_shuffle(ex, op, blocks, seed=seed, num_blocks=num_blocks)
    counts = [rows for rows, _ in ex.metas(blocks)]
    sizes = _split_evenly(sum(counts), num_blocks)
    return _gather(ex, op, blocks, slice_plan(counts, sizes))


def random_shuffle(ex: Execution, op: PhysicalOp, blocks: list[Any], *, seed: int | None,
                   num_blocks: int | None = None) -> list[Any]:
    if not blocks:
        return []
    n = num_blocks or len(blocks)
    seed = random.randrange(2**31) if seed is None else seed
    parts = [ex.submit(op, tasks.split_random, b, n, seed * 7919 + i) for i, b in enumerate(blocks)]
    return [ex.submit(op, tasks.concat_shuffled, seed * 104729 + j,
                      *[ex.submit(op, tasks.pick, p, j) for p in parts]) for j in range(n)]


def sort(ex: Execution, op: PhysicalOp, blocks: list[Any], *, keys: tuple[str, ...],
         descending: tuple[bool, ...]) -> list[Any]:
    """Range partitions on the first key (in its direction), each sorted on all keys."""
    if not blocks:
        return []
    n = len(blocks)
    samples = ex.gather([ex.submit(op, tasks.sample_keys, b, keys, 64, i) for i, b in enumerate(blocks)])
    first = missing_as_null(concat(samples).column(keys[0])).drop_null().sort()  # missing keys: last range
    if n == 1 or len(first) == 0:
        return [ex.submit(op, tasks.concat_sorted, keys, descending, *blocks)]
    step = len(first) / n
    bounds = pa.table({keys[0]: first.take(pa.array([int(step * i) for i in range(1, n)]))})
    parts = [ex.submit(op, tasks.split_range, b, keys, bounds, descending[0]) for b in blocks]
    return [ex.submit(op, tasks.concat_sorted, keys, descending,
                      *[ex.submit(op, tasks.pick, p, j) for p in parts]) for j in range(n)]


def aggregate(ex: Execution, op: PhysicalOp, blocks: list[Any], *, keys: tuple[str, ...],
              aggs: tuple[Any, ...]) -> list[Any]:
    partials = [ex.submit(op, tasks.partial, b, keys, aggs) for b in blocks]
    if not partials and keys:
        return []  # no rows, no groups; without keys there is still one row (count 0, sum 0)
    return [ex.submit(op, tasks.combine, keys, aggs, *partials)]


def map_groups(ex: Execution, op: PhysicalOp, blocks: list[Any], *, keys: tuple[str, ...], fn: Any,
               batch_format: str) -> list[Any]:
    n = max(1, len(blocks))
    parts = [ex.submit(op, tasks.split_hash, b, keys, n) for b in blocks]
    return [ex.submit(op, tasks.apply_groups, keys, fn, batch_format,
                      *[ex.submit(op, tasks.pick, p, j) for p in parts]) for j in range(n)]


def join(ex: Execution, op: PhysicalOp, left: list[Any], right: list[Any], *, on: tuple[str, ...],
         right_on: tuple[str, ...], how: str, num_blocks: int | None) -> list[Any]:
    n = num_blocks or max(len(left), len(right), 1)
    lparts = [ex.submit(op, tasks.split_hash, b, on, n) for b in left]
    rparts = [ex.submit(op, tasks.split_hash, b, right_on, n) for b in right]
    return [ex.submit(op, tasks.join_parts, on, right_on, how, len(lparts),
                      *[ex.submit(op, tasks.pick, p, j) for p in lparts],
                      *[ex.submit(op, tasks.pick, p, j) for p in rparts]) for j in range(n)]


def zip_(ex: Execution, op: PhysicalOp, left: list[Any], right: list[Any]) -> list[Any]:
    from ..transforms import UserCodeError

    lcounts = [rows for rows, _ in ex.metas(left)]
    rcounts = [rows for rows, _ in ex.metas(right)]
    if sum(lcounts) != sum(rcounts):
        raise UserCodeError(f"zip needs datasets with the same number of rows; got {sum(lcounts)} and {sum(rcounts)}")
    aligned = _gather(ex, op, right, slice_plan(rcounts, lcounts))
    return [ex.submit(op, tasks.zip_blocks, lb, rb) for lb, rb in zip(left, aligned, strict=True)]
