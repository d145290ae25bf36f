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

The functions here take and give plans; :class:`~.dataset.Dataset`'s split
methods wrap them (this module does not import the Dataset).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ..errors import ConfigError
from .consume import materialized
from .execution.shared import register
from .logical import operators as lo
from .physical import tasks
from .physical.exchanges import slice_plan

__all__ = ["split_at_indices", "split_proportionately", "train_test_split", "split", "cut_blocks",
           "share_split_inputs"]


def _parts(plan: lo.LogicalOp, spec: lo.SplitSpec, n_parts: int) -> list[lo.LogicalOp]:
    if not isinstance(plan, lo.FromBlocks):
        shared = lo.Shared(plan, uuid.uuid4().hex)
        register(shared, shared.token)
        return [lo.RowSlice(shared, spec, i) for i in range(n_parts)]
    return list(cut_blocks(plan, spec.bounds(sum(plan.rows))))


def cut_blocks(source: lo.FromBlocks, bounds: list[int]) -> list[lo.FromBlocks]:
    """The plans of rows [bounds[i], bounds[i+1]) of materialized blocks, sliced on the workers.

    ``source`` is the plan of a materialized Dataset (``ds.materialize().plan``);
    whole blocks are reused, partial ones are sliced by tasks on the cluster.
    The public seam Train uses to give each rank an exact share of the rows.

    >>> parts = cut_blocks(ds.materialize().plan, [0, 50, 100])   # doctest: +SKIP
    >>> [sum(p.rows) for p in parts]                               # doctest: +SKIP
    [50, 50]
    """
    from distributed import get_client

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
        out.append(lo.FromBlocks(tuple(blocks), tuple(rows), f"Split[{i}]"))
    return out


def split_at_indices(plan: lo.LogicalOp, indices: Sequence[int]) -> list[lo.LogicalOp]:
    """Plans of rows [0, i0), [i0, i1), ..., [ik, end)."""
    if any(b < a for a, b in zip(indices[:-1], indices[1:], strict=False)) or any(i < 0 for i in indices):
        raise ConfigError(f"split indices must be non-negative and increasing, got {list(indices)}")
    return _parts(plan, lo.SplitSpec("indices", tuple(float(i) for i in indices)), len(indices) + 1)


def split_proportionately(plan: lo.LogicalOp, proportions: Sequence[float]) -> list[lo.LogicalOp]:
    """Plans with the given fractions of the rows, and a last one with the rest."""
    if any(p <= 0 for p in proportions) or sum(proportions) >= 1:
        raise ConfigError(f"proportions must be positive and sum to less than 1, got {list(proportions)}")
    return _parts(plan, lo.SplitSpec("fractions", tuple(proportions)), len(proportions) + 1)


def train_test_split(plan: lo.LogicalOp, test_size: float | int) -> tuple[lo.LogicalOp, lo.LogicalOp]:
    """(train, test) plans; the last ``test_size`` rows (a fraction or a count) are the test part."""
    if isinstance(test_size, float):
        if not 0 < test_size < 1:
            raise ConfigError(f"a fractional test_size must be between 0 and 1, got {test_size}")
        spec = lo.SplitSpec("fractions", (1.0 - test_size,))
    elif isinstance(test_size, int) and test_size >= 0:
        spec = lo.SplitSpec("from_end", (float(test_size),))
    else:
        raise ConfigError(f"test_size is a fraction in (0, 1) or a row count >= 0, got {test_size!r}")
    train, test = _parts(plan, spec, 2)
    return train, test


def split(plan: lo.LogicalOp, n: int, *, equal: bool = False) -> list[lo.LogicalOp]:
    """``n`` plans; with ``equal`` exactly the same row counts (extra rows dropped)."""
    if n < 1:
        raise ConfigError(f"split needs n >= 1, got {n}")
    return _parts(plan, lo.SplitSpec("equal" if equal else "even", (float(n),)), n)


def share_split_inputs(plans: dict[str, lo.LogicalOp]) -> dict[str, lo.LogicalOp]:
    """The plans with every lazy split part cut from its input run once, not once per part.

    ``train, valid = ds.train_test_split(...)`` gives two plans that each run
    all of ``ds``; consumers that need both (a trainer) call this first, so
    ``ds`` is materialized once and both parts are slices of its blocks.
    """
    cut: dict[int, tuple[lo.FromBlocks, dict[lo.SplitSpec, list[lo.FromBlocks]]]] = {}

    def rewrite(op: lo.LogicalOp) -> lo.LogicalOp:
        if isinstance(op, lo.RowSlice):
            key = id(op.input)
            if key not in cut:
                cut[key] = (materialized(op.input), {})
            source, parts = cut[key]
            if op.spec not in parts:
                parts[op.spec] = cut_blocks(source, op.spec.bounds(sum(source.rows)))
            return parts[op.spec][op.part]
        inputs = op.inputs
        new = tuple(rewrite(child) for child in inputs)
        if any(a is not b for a, b in zip(inputs, new, strict=True)):
            return op.with_inputs(*new)
        return op

    return {name: rewrite(plan) for name, plan in plans.items()}
