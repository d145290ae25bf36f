"""Splitting a dataset by row position: these run the plan to learn the row counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .logical import operators as lo
from .physical import tasks
from .physical.exchanges import slice_plan

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = ["split_at_indices", "split_proportionately", "train_test_split", "split"]


def _blocks(ds: Dataset) -> lo.FromBlocks:
    plan = ds.materialize()._plan
    assert isinstance(plan, lo.FromBlocks)
    return plan


def _cut(source: lo.FromBlocks, bounds: list[int], name: str) -> list[Dataset]:
    """Datasets of rows [bounds[i], bounds[i+1]) of ``source``, sliced on the workers."""
    from distributed import get_client

    from .dataset import Dataset

    client = get_client()
    counts = list(source.rows)
    sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if bounds[0] > 0:
        sizes = [bounds[0], *sizes]
    plans = slice_plan(counts, sizes)[1 if bounds[0] > 0 else 0:]
    out = []
    for i, pieces in enumerate(plans):
        blocks, rows = [], []
        for block, start, stop in pieces:
            if start == 0 and stop == counts[block]:
                blocks.append(source.blocks[block])
            else:
                blocks.append(client.submit(tasks.slice_block, source.blocks[block], start, stop, pure=False))
            rows.append(stop - start)
        out.append(Dataset(lo.FromBlocks(tuple(blocks), tuple(rows), f"{name}[{i}]")))
    return out


def split_at_indices(ds: Dataset, indices: Sequence[int]) -> list[Dataset]:
    """Datasets of rows [0, i0), [i0, i1), ..., [ik, end)."""
    if any(b < a for a, b in zip(indices[:-1], indices[1:], strict=False)) or any(i < 0 for i in indices):
        raise ValueError(f"split indices must be non-negative and increasing, got {list(indices)}")
    source = _blocks(ds)
    total = sum(source.rows)
    bounds = [0, *[min(i, total) for i in indices], total]
    return _cut(source, bounds, "Split")


def split_proportionately(ds: Dataset, proportions: Sequence[float]) -> list[Dataset]:
    """Datasets with the given fractions of the rows, and a last one with the rest."""
    if any(p <= 0 for p in proportions) or sum(proportions) >= 1:
        raise ValueError(f"proportions must be positive and sum to less than 1, got {list(proportions)}")
    source = _blocks(ds)
    total = sum(source.rows)
    bounds, acc = [0], 0.0
    for p in proportions:
        acc += p
        bounds.append(int(round(total * acc)))
    bounds.append(total)
    return _cut(source, bounds, "Split")


def train_test_split(ds: Dataset, test_size: float | int, *, shuffle: bool = False,
                     seed: int | None = None) -> tuple[Dataset, Dataset]:
    if isinstance(test_size, float):
        if not 0 < test_size < 1:
            raise ValueError(f"a fractional test_size must be between 0 and 1, got {test_size}")
    elif not isinstance(test_size, int) or test_size < 0:
        raise ValueError(f"test_size is a fraction in (0, 1) or a row count >= 0, got {test_size!r}")
    if shuffle:
        ds = ds.random_shuffle(seed=seed)
    source = _blocks(ds)
    total = sum(source.rows)
    n_test = int(round(total * test_size)) if isinstance(test_size, float) else min(test_size, total)
    train, test = _cut(source, [0, total - n_test, total], "TrainTestSplit")
    return train, test


def split(ds: Dataset, n: int, *, equal: bool = False) -> list[Dataset]:
    """``n`` datasets; with ``equal`` exactly the same row counts (extra rows dropped)."""
    if n < 1:
        raise ValueError(f"split needs n >= 1, got {n}")
    source = _blocks(ds)
    total = sum(source.rows)
    each = total // n
    if equal:
        bounds = [each * i for i in range(n + 1)]
    else:
        base, extra = divmod(total, n)
        bounds = [0]
        for i in range(n):
            bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    return _cut(source, bounds, "Split")
