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

from .block import concat
from .nulls import with_missing_as_null

__all__ = ["AggregateFn", "Count", "Sum", "Min", "Max", "Mean", "Std", "partial_aggregate",
           "combine_partials"]


@dataclass(frozen=True)
class AggregateFn:
    """One aggregation: ``on`` a column (Ray's ``alias_name`` is ``alias``).

    ``ignore_nulls`` (Ray's, default True) leaves missing values out; False
    makes a group's result null when the group has one. ``Count`` counts
    the rows where ``on`` has a value (all rows without ``on``); with
    ``ignore_nulls=False`` it counts every row.
    """

    on: str | None = None
    alias: str | None = None
    kind: str = ""
    ignore_nulls: bool | None = None  # None: the kind's default

    @property
    def output_name(self) -> str:
        return self.alias or (f"{self.kind}({self.on})" if self.on else f"{self.kind}()")

    @property
    def keeps_nulls(self) -> bool:
        """A missing value makes the result missing (``ignore_nulls=False``, for what is not a count)."""
        return self.ignore_nulls is False and self.kind != "count"

    def _state(self, name: str) -> str:
        return f"__{self.output_name}__{name}"


def _init(agg: AggregateFn, on: str | None, alias: str | None, kind: str, alias_name: str | None,
          ignore_nulls: bool | None) -> None:
    from ..errors import ConfigError

    if alias is not None and alias_name is not None:
        raise ConfigError(f"{type(agg).__name__} takes alias= or Ray's alias_name=, not both")
    if ignore_nulls is not None and not isinstance(ignore_nulls, bool):
        raise ConfigError(f"ignore_nulls must be True or False, got {ignore_nulls!r}")
    AggregateFn.__init__(agg, on, alias if alias is not None else alias_name, kind, ignore_nulls)


class Count(AggregateFn):
    def __init__(self, on: str | None = None, alias: str | None = None, *, alias_name: str | None = None,
                 ignore_nulls: bool | None = None) -> None:
        _init(self, on, alias, "count", alias_name, ignore_nulls)


class Sum(AggregateFn):
    def __init__(self, on: str, alias: str | None = None, *, alias_name: str | None = None,
                 ignore_nulls: bool = True) -> None:
        _init(self, on, alias, "sum", alias_name, ignore_nulls)


class Min(AggregateFn):
    def __init__(self, on: str, alias: str | None = None, *, alias_name: str | None = None,
                 ignore_nulls: bool = True) -> None:
        _init(self, on, alias, "min", alias_name, ignore_nulls)


class Max(AggregateFn):
    def __init__(self, on: str, alias: str | None = None, *, alias_name: str | None = None,
                 ignore_nulls: bool = True) -> None:
        _init(self, on, alias, "max", alias_name, ignore_nulls)


class Mean(AggregateFn):
    def __init__(self, on: str, alias: str | None = None, *, alias_name: str | None = None,
                 ignore_nulls: bool = True) -> None:
        _init(self, on, alias, "mean", alias_name, ignore_nulls)


class Std(AggregateFn):
    """Standard deviation with ``ddof`` (1 by default, like pandas)."""

    def __init__(self, on: str, alias: str | None = None, ddof: int = 1, *, alias_name: str | None = None,
                 ignore_nulls: bool = True) -> None:
        _init(self, on, alias, "std", alias_name, ignore_nulls)
        object.__setattr__(self, "ddof", ddof)


def _check(table: pa.Table, keys: tuple[str, ...], aggs: tuple[AggregateFn, ...]) -> None:
    from .transforms import ColumnNotFoundError

    wanted = list(keys) + [a.on for a in aggs if a.on is not None]
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise ColumnNotFoundError(
            f"aggregate: column(s) {missing} not found; the data has columns {table.column_names}")


def partial_aggregate(table: pa.Table, keys: tuple[str, ...], aggs: tuple[AggregateFn, ...]) -> pa.Table:
    """Per-group partial states of ``aggs`` over one block (missing values as in :mod:`.nulls`)."""
    _check(table, keys, aggs)
    table = with_missing_as_null(table, list(dict.fromkeys([*keys, *(a.on for a in aggs if a.on is not None)])))
    specs: list[tuple[Any, ...]] = []
    names: list[str] = []
    for agg in aggs:
        if agg.keeps_nulls:
            specs.append((agg.on, "count", pc.CountOptions(mode="only_null")))
            names.append(agg._state("nulls"))
        if agg.kind == "count":
            column = agg.on if agg.on is not None else (keys[0] if keys else table.column_names[0])
            every = agg.on is None or agg.ignore_nulls is False
            specs.append((column, "count", pc.CountOptions(mode="all" if every else "only_valid")))
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
    """The final aggregates from every block's partial states, sorted by the keys (missing keys last).

    With no keys there is always one row, also for no rows at all (count and sum 0, the others null).
    """
    import pandas as pd

    # an empty block's partial has no rows and float64 states; skip it so the types merge
    partials = [p for p in partials if p.num_rows] or partials[:1]
    if partials:
        frame = concat(partials).to_pandas()  # int keys of one block may be floats in another (numpy maps)
    else:
        frame = pd.DataFrame({a._state(k): pd.Series([], dtype="float64")
                              for a in aggs for k in ("n", a.kind, "mean", "var")})
    if keys:
        groups: Any = frame.groupby(list(keys), sort=True, dropna=False)
        out = pd.DataFrame(index=groups.size().index)
        gid, size = groups.ngroup().to_numpy(), len(out)
    else:
        groups = frame.assign(__all__=0).groupby("__all__")
        out = pd.DataFrame(index=pd.Index([0], name="__all__"))
        gid, size = np.zeros(len(frame), dtype=np.int64), 1
    for agg in aggs:
        s = agg._state
        if agg.kind in ("count", "sum"):
            total = _per_group(groups[s("n") if agg.kind == "count" else s("sum")].sum(min_count=0), size, 0)
            out[agg.output_name] = total.astype("int64") if agg.kind == "count" else total
        elif agg.kind in ("min", "max"):
            out[agg.output_name] = _per_group(getattr(groups[s(agg.kind)], agg.kind)(), size, None)
        else:
            out[agg.output_name] = _mean_or_std(frame, agg, gid, size)
        if agg.keeps_nulls:  # a group with a missing value has a missing result (Ray's ignore_nulls=False)
            nulls = _per_group(groups[s("nulls")].sum(min_count=0), size, 0)
            out[agg.output_name] = out[agg.output_name].astype(object).where(nulls == 0, None)
    out = out.reset_index()
    if not keys:
        out = out.drop(columns="__all__")
    result = pa.Table.from_pandas(out, preserve_index=False)
    for k in keys:  # pandas turns integer keys with a missing one into floats: back to the block's type
        wanted = concat([p.slice(0, 0) for p in partials]).schema.field(k).type
        if not result.schema.field(k).type.equals(wanted):  # a key missing in every block: pandas made it NaN
            column = pa.nulls(result.num_rows) if pa.types.is_null(wanted) else result.column(k).cast(wanted)
            result = result.set_column(result.schema.get_field_index(k), k, column)
    return result


def _per_group(values: Any, size: int, empty: Any) -> Any:
    """Per-group values in group order; ``empty`` for the one group of a keyless aggregate over no rows."""
    array = values.to_numpy()
    return array if len(array) == size else np.array([empty] * size, dtype=object if empty is None else None)


def _mean_or_std(frame: Any, agg: AggregateFn, gid: np.ndarray, size: int) -> np.ndarray:
    """Mean, or standard deviation with the aggregate's ``ddof``, of each group from its blocks' states."""
    s = agg._state
    n = frame[s("n")].to_numpy(dtype="float64")
    block_mean = np.where(n > 0, frame[s("mean")].to_numpy(dtype="float64", na_value=np.nan), 0.0)
    total = np.bincount(gid, weights=n, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(total > 0, np.bincount(gid, weights=block_mean * n, minlength=size) / total, np.nan)
        if agg.kind == "mean":
            return mean
        block_var = np.where(n > 0, frame[s("var")].to_numpy(dtype="float64", na_value=np.nan), 0.0)
        m2 = np.bincount(gid, weights=block_var * n + n * (block_mean - mean[gid]) ** 2, minlength=size)
        denom = total - getattr(agg, "ddof", 1)
        return np.where(denom > 0, np.sqrt(m2 / np.where(denom > 0, denom, 1.0)), np.nan)
