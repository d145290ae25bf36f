"""GroupedData: what ``Dataset.groupby(key)`` returns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .aggregate import AggregateFn, Count, Max, Mean, Min, Std, Sum
from .logical import operators as lo

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = ["GroupedData"]


class GroupedData:
    """Aggregations per group; each returns a Dataset with one row per key, sorted by key."""

    def __init__(self, dataset: Dataset, keys: tuple[str, ...], make: Callable[[lo.LogicalOp], Dataset]) -> None:
        self._dataset = dataset
        self._keys = keys
        self._make = make  # Dataset(plan): given by the dataset, so this module does not import it

    def aggregate(self, *aggs: AggregateFn) -> Dataset:
        if not aggs:
            raise ConfigError("aggregate needs at least one aggregation, e.g. Count() or Mean('x')")
        return self._make(lo.Aggregate(self._dataset._plan, self._keys, tuple(aggs)))

    def count(self) -> Dataset:
        return self.aggregate(Count())

    def _each(self, kind: type[AggregateFn], on: str | Sequence[str], **kw: Any) -> Dataset:
        columns = [on] if isinstance(on, str) else list(on)
        return self.aggregate(*(kind(c, **kw) for c in columns))  # type: ignore[call-arg]

    def sum(self, on: str | Sequence[str]) -> Dataset:
        return self._each(Sum, on)

    def min(self, on: str | Sequence[str]) -> Dataset:
        return self._each(Min, on)

    def max(self, on: str | Sequence[str]) -> Dataset:
        return self._each(Max, on)

    def mean(self, on: str | Sequence[str]) -> Dataset:
        return self._each(Mean, on)

    def std(self, on: str | Sequence[str], ddof: int = 1) -> Dataset:
        return self._each(Std, on, ddof=ddof)

    def map_groups(self, fn: Callable[[Any], Any], *, batch_format: str = "pandas") -> Dataset:
        """``fn(group) -> batch`` on every group (all rows of a key together)."""
        return self._make(lo.MapGroups(self._dataset._plan, self._keys, fn, batch_format))
