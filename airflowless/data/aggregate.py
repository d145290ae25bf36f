"""Aggregations computed in two steps: a partial per block, then a combine.

>>> from airflowless.data.aggregate import Mean
>>> Mean("fare_amount").output_name
'mean(fare_amount)'

Each :class:`AggregateFn` names the partial state it needs (pyarrow hash
aggregations per block) and how to finish from the combined states, so
``groupby(k).mean(c)`` moves only one small table per block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["AggregateFn", "Count", "Sum", "Min", "Max", "Mean", "Std", "partial_aggregate",
           "combine_partials"]


@dataclass(frozen=True)
class AggregateFn:
    on: str | None = None
    alias: str | None = None
    kind: str = ""

    @property
    def output_name(self) -> str:
        return self.alias or (f"{self.kind}({self.on})" if self.on else f"{self.kind}()")

    def _state(self, name: str) -> str:
        return f"__{self.output_name}__{name}"


class Count(AggregateFn):
    def __init__(self, on: str | None = None, alias: str | None = None) -> None:
        super().__init__(on, alias, "count")


class Sum(AggregateFn):
    def __init__(self, on: str, alias: str | None = None) -> None:
        super().__init__(on, alias, "sum")


class Min(AggregateFn):
    def __init__(self, on: str, alias: str | None = None) -> None:
        super().__init__(on, alias, "min")


class Max(AggregateFn):
    def __init__(self, on: str, alias: str | None = None) -> None:
        super().__init__(on, alias, "max")


class Mean(AggregateFn):
    def __init__(self, on: str, alias: str | None = None) -> None:
        super().__init__(on, alias, "mean")


class Std(AggregateFn):
    """Standard deviation with ``ddof`` (1 by default, like pandas)."""

    def __init__(self, on: str, alias: str | None = None, ddof: int = 1) -> None:
        super().__init__(on, alias, "std")
        object.__setattr__(self, "ddof", ddof)


def _check(table: pa.Table, keys: tuple[str, ...], aggs: tuple[AggregateFn, ...]) -> None:
    from .transforms import ColumnNotFoundError

    wanted = list(keys) + [a.on for a in aggs if a.on is not None]
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise ColumnNotFoundError(
            f"aggregate: column(s) {missing} not found; the data has columns {table.column_names}")


def partial_aggregate(table: pa.Table, keys: tuple[str, ...], aggs: tuple[AggregateFn, ...]) -> pa.Table:
    """Per-group partial states of ``aggs`` over one block."""
    _check(table, keys, aggs)
    specs: list[tuple[Any, ...]] = []
    names: list[str] = []
    for agg in aggs:
        if agg.kind == "count":
            column = agg.on if agg.on is not None else (keys[0] if keys else table.column_names[0])
            specs.append((column, "count", pc.CountOptions(mode="only_valid" if agg.on else "all")))
            names.append(agg._state("n"))
        elif agg.kind in ("sum", "min", "max"):
            specs.append((agg.on, agg.kind))
            names.append(agg._state(agg.kind))
        else:  # mean, std: count, mean, M2 (merged with Chan's formula)
            specs += [(agg.on, "count"), (agg.on, "mean")]
            names += [agg._state("n"), agg._state("mean")]
            if agg.kind == "std":
                specs.append((agg.on, "variance", pc.VarianceOptions(ddof=0)))
                names.append(agg._state("var"))
    if table.num_rows == 0:
        return pa.table({**{k: table.column(k) for k in keys}, **{n: pa.array([], pa.float64()) for n in names}})
    grouped = table.group_by(list(keys), use_threads=False).aggregate(specs)
    # pyarrow names results "<col>_<fn>" (not unique); the keys come first or last by version
    if keys and grouped.column_names[: len(keys)] == list(keys):
        return grouped.rename_columns(list(keys) + names)
    return grouped.rename_columns(names + list(keys))


def combine_partials(partials: list[pa.Table], keys: tuple[str, ...], aggs: tuple[AggregateFn, ...]) -> pa.Table:
    """The final aggregates from every block's partial states, sorted by the keys."""
    import pandas as pd

    # an empty block's partial has no rows and float64 states; skip it so the types merge
    partials = [p for p in partials if p.num_rows] or partials[:1]
    frame = pa.concat_tables(partials, promote_options="default").to_pandas()
    if keys:
        groups: Any = frame.groupby(list(keys), sort=True, dropna=False)
    else:
        frame = frame.assign(__all__=0)
        groups = frame.groupby("__all__", sort=True)
    out = pd.DataFrame(index=groups.size().index)
    for agg in aggs:
        s = agg._state
        if agg.kind == "count":
            out[agg.output_name] = groups[s("n")].sum().astype("int64")
        elif agg.kind == "sum":
            out[agg.output_name] = groups[s("sum")].sum(min_count=1)
        elif agg.kind == "min":
            out[agg.output_name] = groups[s("min")].min()
        elif agg.kind == "max":
            out[agg.output_name] = groups[s("max")].max()
        else:
            n = frame[s("n")].astype("float64")
            weighted = frame[s("mean")] * n
            total_n = groups[s("n")].sum().astype("float64")
            mean = weighted.groupby(_group_index(frame, keys)).sum() / total_n
            if agg.kind == "mean":
                out[agg.output_name] = mean.where(total_n > 0)
            else:
                var_n = frame[s("var")] * n
                group_mean = _broadcast(mean, frame, keys)
                m2 = (var_n + n * (frame[s("mean")] - group_mean) ** 2).groupby(_group_index(frame, keys)).sum()
                ddof = getattr(agg, "ddof", 1)
                denom = (total_n - ddof).where(total_n - ddof > 0)
                out[agg.output_name] = np.sqrt(m2 / denom)
    out = out.reset_index()
    if not keys:
        out = out.drop(columns="__all__")
    return pa.Table.from_pandas(out, preserve_index=False)


def _group_index(frame: Any, keys: tuple[str, ...]) -> Any:
    import pandas as pd

    if not keys:
        return frame["__all__"]
    if len(keys) == 1:
        return frame[keys[0]]
    return pd.MultiIndex.from_frame(frame[list(keys)])


def _broadcast(per_group: Any, frame: Any, keys: tuple[str, ...]) -> Any:
    index = _group_index(frame, keys)
    return per_group.reindex(index).to_numpy()
