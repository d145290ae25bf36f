"""Splitting a dataset by row position.

A dataset already materialized is cut at once, where its blocks are. Any
other dataset stays lazy: each part is a ``RowSlice`` of one ``Shared`` node
over the plan, which learns the row count when it runs — so the parts can
travel between pipeline stages as plans. The shared input runs once, at the
first run of any part, and its blocks are kept for the other parts: the parts
partition the same rows even when the plan draws random numbers (a
``map_batches`` with numpy random). A part unpickled in another process runs
its input again there; shuffles have their seed fixed when the plan is built,
so that is the same rows unless user code draws random numbers.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .execution.shared import register
from .logical import operators as lo
from .physical import tasks
from .physical.exchanges import slice_plan

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = ["split_at_indices", "split_proportionately", "train_test_split", "split", "cut_blocks",
           "share_split_inputs"]


def _parts(ds: Dataset, spec: lo.SplitSpec, n_parts: int) -> list[Dataset]:
    from .dataset import Dataset

    plan = ds._plan
    if not isinstance(plan, lo.FromBlocks):
        shared = lo.Shared(plan, uuid.uuid4().hex)
        register(shared, shared.token)
        return [Dataset(lo.RowSlice(shared, spec, i)) for i in range(n_parts)]
    return cut_blocks(plan, spec.bounds(sum(plan.rows)))


def cut_blocks(source: lo.FromBlocks, bounds: list[int]) -> list[Dataset]:
    """Datasets of rows [bounds[i], bounds[i+1]) of materialized blocks, sliced on the workers.

    ``source`` is the plan of a materialized Dataset (``ds.materialize().plan``);
    whole blocks are reused, partial ones are sliced by tasks on the cluster.
    The public seam Train uses to give each rank an exact share of the rows.

    >>> parts = cut_blocks(ds.materialize().plan, [0, 50, 100])   # doctest: +SKIP
    >>> [p.count() for p in parts]                                 # doctest: +SKIP
    [50, 50]
    """
    from distributed import get_client

    from .dataset import Dataset

    client = get_client()
    counts = list(source.rows)
    sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    out = []
    for i, pieces in enumerate(slice_plan(counts, sizes)):
        blocks, rows = [], []
        for block, start, stop in pieces:
            if start == 0 and stop == counts[block]:
                blocks.append(source.blocks[block])
            else:
                blocks.append(client.submit(tasks.slice_block, source.blocks[block], start, stop, pure=False))
            rows.append(stop - start)
        out.append(Dataset(lo.FromBlocks(tuple(blocks), tuple(rows), f"Split[{i}]")))
    return out


def split_at_indices(ds: Dataset, indices: Sequence[int]) -> list[Dataset]:
    """Datasets of rows [0, i0), [i0, i1), ..., [ik, end)."""
    if any(b < a for a, b in zip(indices[:-1], indices[1:], strict=False)) or any(i < 0 for i in indices):
        raise ConfigError(f"split indices must be non-negative and increasing, got {list(indices)}")
    return _parts(ds, lo.SplitSpec("indices", tuple(float(i) for i in indices)), len(indices) + 1)


def split_proportionately(ds: Dataset, proportions: Sequence[float]) -> list[Dataset]:
    """Datasets with the given fractions of the rows, and a last one with the rest."""
    if any(p <= 0 for p in proportions) or sum(proportions) >= 1:
        raise ConfigError(f"proportions must be positive and sum to less than 1, got {list(proportions)}")
    return _parts(ds, lo.SplitSpec("fractions", tuple(proportions)), len(proportions) + 1)


def train_test_split(ds: Dataset, test_size: float | int, *, shuffle: bool = False,
                     seed: int | None = None) -> tuple[Dataset, Dataset]:
    """(train, test); the last ``test_size`` rows (a fraction or a count) are the test part."""
    if isinstance(test_size, float):
        if not 0 < test_size < 1:
            raise ConfigError(f"a fractional test_size must be between 0 and 1, got {test_size}")
        spec = lo.SplitSpec("fractions", (1.0 - test_size,))
    elif isinstance(test_size, int) and test_size >= 0:
        spec = lo.SplitSpec("from_end", (float(test_size),))
    else:
        raise ConfigError(f"test_size is a fraction in (0, 1) or a row count >= 0, got {test_size!r}")
    if shuffle:
        ds = ds.random_shuffle(seed=random.randrange(2**31) if seed is None else seed)
    train, test = _parts(ds, spec, 2)
    return train, test


def split(ds: Dataset, n: int, *, equal: bool = False) -> list[Dataset]:
    """``n`` datasets; with ``equal`` exactly the same row counts (extra rows dropped)."""
    if n < 1:
        raise ConfigError(f"split needs n >= 1, got {n}")
    return _parts(ds, lo.SplitSpec("equal" if equal else "even", (float(n),)), n)


def share_split_inputs(plans: dict[str, lo.LogicalOp]) -> dict[str, lo.LogicalOp]:
    """The plans with every lazy split part cut from its input run once, not once per part.

    ``train, valid = ds.train_test_split(...)`` gives two plans that each run
    all of ``ds``; consumers that need both (a trainer) call this first, so
    ``ds`` is materialized once and both parts are slices of its blocks.
    """
    from .dataset import Dataset

    cut: dict[int, tuple[lo.FromBlocks, dict[lo.SplitSpec, list[Dataset]]]] = {}

    def rewrite(op: lo.LogicalOp) -> lo.LogicalOp:
        if isinstance(op, lo.RowSlice):
            key = id(op.input)
            if key not in cut:
                materialized = Dataset(op.input).materialize()._plan
                assert isinstance(materialized, lo.FromBlocks)
                cut[key] = (materialized, {})
            source, parts = cut[key]
            if op.spec not in parts:
                parts[op.spec] = cut_blocks(source, op.spec.bounds(sum(source.rows)))
            return parts[op.spec][op.part]._plan
        inputs = op.inputs
        new = tuple(rewrite(child) for child in inputs)
        if any(a is not b for a, b in zip(inputs, new, strict=True)):
            return op.with_inputs(*new)
        return op

    return {name: rewrite(plan) for name, plan in plans.items()}
