"""Per-block transforms: picklable callables ``Table -> Table`` that tasks run.

Logical operators hold these (never the other way round), so a fused task
ships only the transforms it runs, not the plan above them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import AirflowlessError, ConfigError, UsageError
from .block import check_format, concat, from_batch, to_batch
from .expressions import describe

__all__ = ["BlockTransform", "MapBatchesFn", "MapRowsFn", "FlatMapFn", "FilterFn", "ProjectFn",
           "RenameFn", "DropFn", "AddColumnFn", "ColumnNotFoundError", "UserCodeError"]


class ColumnNotFoundError(AirflowlessError, KeyError):
    """A column named by the user is not in the data."""

    def __str__(self) -> str:
        return str(self.args[0])


class UserCodeError(AirflowlessError, RuntimeError):
    """A user function raised inside an operator; names the operator."""


def _check_columns(table: pa.Table, columns: Sequence[str], where: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ColumnNotFoundError(
            f"{where}: column(s) {missing} not found; the data has columns {table.column_names}"
        )


class BlockTransform:
    """A transform of one block. ``name`` shows in plans and in Dask task keys."""

    name: str = "Map"
    one_to_one: bool = False  # keeps every row, in order (a limit may move below it)

    def __call__(self, table: pa.Table) -> pa.Table:
        raise NotImplementedError


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _call_user(where: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except AirflowlessError:
        raise
    except Exception as exc:
        raise UserCodeError(f"{where} raised {type(exc).__name__}: {exc}") from exc


_INSTANCES: dict[str, Any] = {}  # per-process cache of stateful (class) batch functions


def drop_instances(keys: list[str]) -> None:
    """Let this process's instances of the class batch functions ``keys`` go (an actor pool's end)."""
    for key in keys:
        _INSTANCES.pop(key, None)


@dataclass(frozen=True, eq=False)
class MapBatchesFn(BlockTransform):
    """``fn(batch)`` per batch; a class is constructed once per worker process and kept."""

    fn: Any
    batch_size: int | None = None
    batch_format: str = "numpy"
    fn_args: tuple[Any, ...] = ()
    fn_kwargs: dict[str, Any] = field(default_factory=dict)
    fn_constructor_args: tuple[Any, ...] = ()
    fn_constructor_kwargs: dict[str, Any] = field(default_factory=dict)
    instance_key: str = ""
    zero_copy_batch: bool = False  # numpy batches as Arrow's read-only views, not writable copies

    def __post_init__(self) -> None:
        check_format(self.batch_format)
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive number of rows or None, got {self.batch_size}")
        if not callable(self.fn):
            raise UsageError(f"map_batches takes a function or a callable class, got {self.fn!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"MapBatches({_fn_name(self.fn)})"

    @property
    def is_class(self) -> bool:
        return inspect.isclass(self.fn)

    def _callable(self) -> Callable[..., Any]:
        if not self.is_class:
            return self.fn  # type: ignore[no-any-return]
        instance = _INSTANCES.get(self.instance_key)
        if instance is None:
            instance = _call_user(f"{self.name} constructor", self.fn, *self.fn_constructor_args,
                                  **self.fn_constructor_kwargs)
            _INSTANCES[self.instance_key] = instance
        return instance  # type: ignore[no-any-return]

    def __call__(self, table: pa.Table) -> pa.Table:
        fn = self._callable()
        size = self.batch_size or max(table.num_rows, 1)
        outputs = []
        writable = self.batch_format == "numpy" and not self.zero_copy_batch
        for start in range(0, max(table.num_rows, 1), size):
            batch = to_batch(table.slice(start, size), self.batch_format)
            if writable:
                batch = {name: _writable(values) for name, values in batch.items()}
            try:
                result = _call_user(self.name, fn, batch, *self.fn_args, **self.fn_kwargs)
            except UserCodeError as exc:
                if self.zero_copy_batch and "read-only" in str(exc):
                    raise UserCodeError(f"{exc}: with zero_copy_batch=True the batch's arrays are read-only views "
                                        "of the data; copy an array before writing to it, or leave "
                                        "zero_copy_batch False") from exc.__cause__
                raise
            outputs.append(from_batch(result, where=self.name))
        return concat(outputs)


def _writable(values: Any) -> Any:
    """``values``, copied if it is a read-only numpy array (a view of Arrow's memory)."""
    return values.copy() if isinstance(values, np.ndarray) and not values.flags.writeable else values


@dataclass(frozen=True, eq=False)
class MapRowsFn(BlockTransform):
    """``fn(row: dict) -> dict`` per row."""

    fn: Any
    one_to_one = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"Map({_fn_name(self.fn)})"

    def __call__(self, table: pa.Table) -> pa.Table:
        rows = [_call_user(self.name, self.fn, row) for row in table.to_pylist()]
        for row in rows[:1]:
            if not isinstance(row, dict):
                raise UserCodeError(f"{self.name} must return a dict per row, got {type(row).__name__}")
        return pa.Table.from_pylist(rows) if rows else table


@dataclass(frozen=True, eq=False)
class FlatMapFn(BlockTransform):
    """``fn(row: dict) -> list[dict]`` per row."""

    fn: Any

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"FlatMap({_fn_name(self.fn)})"

    def __call__(self, table: pa.Table) -> pa.Table:
        rows: list[dict[str, Any]] = []
        for row in table.to_pylist():
            rows.extend(_call_user(self.name, self.fn, row))
        return pa.Table.from_pylist(rows) if rows else table.slice(0, 0)


@dataclass(frozen=True, eq=False)
class FilterFn(BlockTransform):
    """Keep rows where ``expr`` (a pyarrow expression) holds, or where ``fn(row)`` is true."""

    fn: Any = None
    expr: Any = None

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"Filter({_fn_name(self.fn)})" if self.fn is not None else f"Filter({describe(self.expr)})"

    def __call__(self, table: pa.Table) -> pa.Table:
        if self.expr is not None:
            try:
                return table.filter(_mask(table, self.expr))
            except (pa.ArrowInvalid, KeyError) as exc:
                raise ColumnNotFoundError(
                    f"{self.name} cannot be evaluated on columns {table.column_names}: {exc}") from exc
        keep = [bool(_call_user(self.name, self.fn, row)) for row in table.to_pylist()]
        return table.filter(pa.array(keep, type=pa.bool_()))


def _mask(table: pa.Table, expr: Any) -> pa.Array:
    """Where ``expr`` holds on ``table``, one boolean per row: Arrow's projection of it, on this thread.

    ``table.filter(expr)`` goes through Acero's filter node, which takes about
    twice as long and cuts its output into 32,768-row chunks.
    """
    from pyarrow import acero

    plan = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("project", acero.ProjectNodeOptions([expr], ["mask"]))])
    mask = plan.to_table(use_threads=False).column(0)
    if not pa.types.is_boolean(mask.type):
        raise ConfigError(f"a filter's expression must be a condition (true or false for each row), but "
                          f"{expr} evaluates to {mask.type}; compare it, e.g. {expr} > 0")
    return mask.combine_chunks()


@dataclass(frozen=True, eq=False)
class ProjectFn(BlockTransform):
    columns: tuple[str, ...]
    one_to_one = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"Project({', '.join(self.columns)})"

    def __call__(self, table: pa.Table) -> pa.Table:
        _check_columns(table, self.columns, "select_columns")
        return table.select(list(self.columns))


@dataclass(frozen=True, eq=False)
class DropFn(BlockTransform):
    columns: tuple[str, ...]
    one_to_one = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"DropColumns({', '.join(self.columns)})"

    def __call__(self, table: pa.Table) -> pa.Table:
        _check_columns(table, self.columns, "drop_columns")
        return table.drop_columns(list(self.columns))


@dataclass(frozen=True, eq=False)
class RenameFn(BlockTransform):
    mapping: dict[str, str]
    one_to_one = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return "RenameColumns(" + ", ".join(f"{a}->{b}" for a, b in self.mapping.items()) + ")"

    def __call__(self, table: pa.Table) -> pa.Table:
        _check_columns(table, list(self.mapping), "rename_columns")
        return table.rename_columns([self.mapping.get(c, c) for c in table.column_names])


@dataclass(frozen=True, eq=False)
class AddColumnFn(BlockTransform):
    """``fn(batch) -> column`` added (or replaced) as ``column``."""

    column: str
    fn: Any
    batch_format: str = "pandas"
    one_to_one = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"AddColumn({self.column})"

    def __call__(self, table: pa.Table) -> pa.Table:
        values = _call_user(self.name, self.fn, to_batch(table, self.batch_format))
        array = pa.array(values.to_numpy() if hasattr(values, "to_numpy") else values)
        if len(array) != table.num_rows:
            raise UserCodeError(f"{self.name} returned {len(array)} values for {table.num_rows} rows")
        if self.column in table.column_names:
            return table.set_column(table.column_names.index(self.column), self.column, array)
        return table.append_column(self.column, array)


def run_chain(table: pa.Table, transforms: Sequence[BlockTransform]) -> pa.Table:
    for transform in transforms:
        table = transform(table)
    return table


