"""Dividing materialized datasets among ranks: by locality, or in exactly equal parts."""

from __future__ import annotations

from typing import Any

__all__ = ["assign_shards"]


def assign_shards(client: Any, datasets: dict[str, Any], workers: list[str], *, equal: bool) -> list[dict[str, Any]]:
    """For each rank, ``{name: (blocks, rows)}``.

    ``equal``: every rank gets exactly ``rows // n`` rows (slices cut on the
    workers), as lock-step collectives need. Otherwise whole blocks go to the
    rank on the worker that holds them, balanced by rows.
    """
    n = len(workers)
    shards: list[dict[str, Any]] = [{} for _ in range(n)]
    for name, plan in datasets.items():
        if equal:
            from ..data.splits import _cut

            each = sum(plan.rows) // n
            parts = _cut(plan, [each * i for i in range(n + 1)])
            for rank, part in enumerate(parts):
                plan_part: Any = part._plan
                shards[rank][name] = (list(plan_part.blocks), sum(plan_part.rows))
            continue
        who = client.who_has(list(plan.blocks))
        loads = [0] * n
        lists: list[list[Any]] = [[] for _ in range(n)]
        target = sum(plan.rows) / n if n else 0
        order = sorted(range(len(plan.blocks)), key=lambda i: -plan.rows[i])
        for i in order:
            block, rows = plan.blocks[i], plan.rows[i]
            local = [r for r, w in enumerate(workers) if w in who.get(block.key, ())]
            candidates = [r for r in local if loads[r] + rows <= target * 1.15] or list(range(n))
            rank = min(candidates, key=lambda r: loads[r])
            lists[rank].append(block)
            loads[rank] += rows
        for rank in range(n):
            shards[rank][name] = (lists[rank], loads[rank])
    return shards
