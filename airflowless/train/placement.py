"""Where a group's ranks go: pure functions over the workers' resources.

A group is placed all at once or not at all (gang placement), one rank per
worker process, preferring workers that already hold its data.

>>> choose_workers({"a": {"CPU": 1}, "b": {"CPU": 1}}, {"CPU": 1}, 2)
['a', 'b']
>>> choose_workers({"a": {"CPU": 1}, "b": {"CPU": 0}}, {"CPU": 1}, 2) is None
True
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError

__all__ = ["CapacityError", "fits", "check_capacity", "choose_workers"]


class CapacityError(ConfigError):
    """The cluster can never give what a group asks for."""


def fits(offer: dict[str, float], need: dict[str, float]) -> bool:
    return all(offer.get(name, 0.0) >= amount - 1e-9 for name, amount in need.items())


def check_capacity(totals: dict[str, dict[str, float]], need: dict[str, float], n: int, *, what: str) -> None:
    """Raise :class:`CapacityError` unless ``n`` distinct workers could each host one rank."""
    able = [addr for addr, offer in totals.items() if fits(offer, need)]
    if len(able) >= n:
        return
    offers = sorted({tuple(sorted(o.items())) for o in totals.values()})
    described = ", ".join(str(dict(o)) for o in offers) or "nothing (no workers)"
    raise CapacityError(
        f"{what} asks for {n} rank(s) with {need} each, one per worker process, but only {len(able)} of the "
        f"cluster's {len(totals)} worker(s) can host one (workers offer {described}); lower "
        "ScalingConfig.num_workers or resources_per_worker, or add workers")


def choose_workers(free: dict[str, dict[str, float]], need: dict[str, float], n: int,
                   prefer: Sequence[str] = ()) -> list[str] | None:
    """``n`` distinct workers that can host a rank now (preferred ones first), or None to wait."""
    able = [addr for addr, offer in free.items() if fits(offer, need)]
    if len(able) < n:
        return None
    rank = {addr: i for i, addr in enumerate(prefer)}
    able.sort(key=lambda addr: (rank.get(addr, len(rank)), -sum(free[addr].values()), addr))
    return able[:n]
