"""Dataset: a lazy, distributed table of rows, in blocks on the Dask workers.

>>> from airflowless import data
>>> ds = data.range(10).map_batches(lambda b: {"id": b["id"] * 2})   # nothing runs yet
>>> ds.filter(expr=data.col("id") > 5).count()                      # doctest: +SKIP
7

Every transform returns a new Dataset whose plan has one more logical
operator; consumers (``count``, ``take``, ``iter_batches``, ``write_*``...)
optimize and run the plan on the cluster.
"""

from __future__ import annotations

import html
import itertools
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from ..errors import ConfigError, UsageError
from . import batches, splits
from .aggregate import AggregateFn, Count, Max, Mean, Min, Std, Sum
from .block import check_format, concat, to_batch
from .compute import actor_pool, concurrency_bound
from .consume import execution_of, iter_blocks, map_reduce, materialized
from .expressions import to_arrow
from .grouped import GroupedData
from .logical import operators as lo
from .logical.operators import render
from .stats import DatasetStats, OperatorStats
from .transforms import (
    AddColumnFn,
    DropFn,
    FilterFn,
    FlatMapFn,
    MapBatchesFn,
    MapRowsFn,
    ProjectFn,
    RenameFn,
)

__all__ = ["Dataset"]


class Dataset(batches.BatchIterable):
    """A lazy table; see the module docstring. Build with ``read_*`` / ``from_*``."""

    def __init__(self, plan: lo.LogicalOp) -> None:
        self._plan = plan

    @property
    def plan(self) -> lo.LogicalOp:
        """The logical plan (an immutable tree of operators), read-only.

        The public seam for other packages (Train cuts the materialized
        ``FromBlocks`` plans it shards); ``Dataset(plan)`` wraps one again.

        >>> data.range(10).limit(3).plan.label   # doctest: +SKIP
        'Limit[3]'
        """
        return self._plan

    # -- transforms ----------------------------------------------------------
    def _then(self, transform: Any, concurrency: int | None = None) -> Dataset:
        return Dataset(lo.MapBlocks(self._plan, transform, concurrency))

    def map_batches(self, fn: Any, *, batch_size: int | None = None, batch_format: str = "numpy",
                    fn_args: Sequence[Any] = (), fn_kwargs: dict[str, Any] | None = None,
                    fn_constructor_args: Sequence[Any] = (),
                    fn_constructor_kwargs: dict[str, Any] | None = None,
                    concurrency: int | tuple[int, int] | None = None, **ray_options: Any) -> Dataset:
        """``fn(batch) -> batch`` on every batch, one task per block.

        A class is constructed once per worker process and kept for later
        blocks (model loading, warm caches); ``concurrency`` bounds how many of
        this operator's tasks run at once. For a class, ``concurrency`` (``n``
        or Ray's ``(min, max)``) and ``compute=ActorPoolStrategy(...)`` make an
        actor pool: the instances live on ``min`` workers, and on one more while
        all are busy and blocks wait, up to ``max`` (see :mod:`.compute`). ``batch_size=None`` gives each call a whole block.
        Numpy batches are writable copies where Arrow's would be read-only
        views (Ray's ``zero_copy_batch=False``, the default); with
        ``zero_copy_batch=True`` they are views, and writing one is an error
        that says so. ``num_gpus`` (Ray's) makes each task declare that many
        ``GPU`` resources, so it runs on a GPU worker, where the GPU is device
        0; such a transform is not fused with its CPU neighbours. Ray's
        ``num_cpus`` and ``memory`` are accepted and ignored: data tasks
        declare no CPUs, so that they never wait behind training ranks that
        hold them.
        """
        unknown = set(ray_options) - {"num_cpus", "num_gpus", "compute", "zero_copy_batch", "memory"}
        if unknown:
            raise UsageError(f"map_batches got unknown argument(s) {sorted(unknown)}; it takes fn, batch_size, "
                            "batch_format, fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs, "
                            "concurrency, compute, zero_copy_batch, num_gpus (Ray's num_cpus and memory are "
                            "accepted and ignored)")
        given, concurrency = concurrency, concurrency_bound(concurrency, ray_options.get("compute"))
        gpus = ray_options.get("num_gpus") or 0
        if isinstance(gpus, bool) or not isinstance(gpus, int | float) or gpus < 0:
            raise ConfigError(f"map_batches(num_gpus=...) must be a number >= 0, got {gpus!r}")
        zero_copy = ray_options.get("zero_copy_batch", False)
        if not isinstance(zero_copy, bool):
            raise ConfigError(f"map_batches(zero_copy_batch=...) is True or False, got {zero_copy!r}")
        transform = MapBatchesFn(fn, batch_size, check_format(batch_format), tuple(fn_args), dict(fn_kwargs or {}),
                                 tuple(fn_constructor_args), dict(fn_constructor_kwargs or {}),
                                 instance_key=uuid.uuid4().hex, zero_copy_batch=zero_copy)
        pool = actor_pool(given, ray_options.get("compute"), is_class=transform.is_class)
        resources = (("GPU", float(gpus)),) if gpus else ()
        if gpus or pool is not None:
            return Dataset(lo.MapBlocks(self._plan, transform, concurrency, resources, pool))
        return self._then(transform, concurrency)

    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Dataset:
        """``fn(row) -> row`` on every row (slower than :meth:`map_batches`)."""
        return self._then(MapRowsFn(fn))

    def flat_map(self, fn: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> Dataset:
        return self._then(FlatMapFn(fn))

    def filter(self, fn: Callable[[dict[str, Any]], bool] | None = None, *, expr: Any = None) -> Dataset:
        """Rows where ``fn(row)`` is true, or where ``expr`` holds: ``col("x") % 2 == 0``, or Ray's text form
        ``"x > 0 and y in [1, 2]"`` (:mod:`.expressions`).

        Expressions run vectorised in Arrow and are pushed into parquet reads (row groups skipped by statistics).
        """
        if (fn is None) == (expr is None):
            raise ConfigError("filter takes either a row function or expr=..., e.g. expr=col('x') > 0")
        if fn is not None and not callable(fn):
            expr, fn = fn, None  # filter(col("x") > 0) works too
        return self._then(FilterFn(fn=fn, expr=None if expr is None else to_arrow(expr)))

    def add_column(self, name: str, fn: Callable[[Any], Any], *, batch_format: str = "pandas") -> Dataset:
        return self._then(AddColumnFn(name, fn, batch_format))

    def drop_columns(self, columns: Sequence[str]) -> Dataset:
        return self._then(DropFn(tuple(columns)))

    def select_columns(self, columns: Sequence[str]) -> Dataset:
        return self._then(ProjectFn(tuple(columns)))

    def rename_columns(self, mapping: dict[str, str]) -> Dataset:
        return self._then(RenameFn(dict(mapping)))

    def limit(self, n: int) -> Dataset:
        if n < 0:
            raise ConfigError(f"limit needs n >= 0, got {n}")
        return Dataset(lo.Limit(self._plan, n))

    def repartition(self, num_blocks: int, *, shuffle: bool = False) -> Dataset:
        """``num_blocks`` blocks of near-equal rows, in order; ``shuffle=True``: at random (as :meth:`random_shuffle`)."""
        if num_blocks < 1:
            raise ConfigError(f"repartition needs num_blocks >= 1, got {num_blocks}")
        return Dataset(lo.Repartition(self._plan, num_blocks, shuffle, _new_seed() if shuffle else None))

    def random_shuffle(self, *, seed: int | None = None, num_blocks: int | None = None) -> Dataset:
        """The rows in a random order.

        Without ``seed``, one is drawn now, when the plan is built: this
        Dataset gives the same order every time it runs (so the parts of a
        split of it never overlap); call ``random_shuffle()`` again for a new order.
        As a trainer's dataset, one without ``seed`` is shuffled afresh each
        epoch, as Ray Train does (:mod:`airflowless.train.epochs`).
        """
        return Dataset(lo.RandomShuffle(self._plan, _new_seed() if seed is None else seed, num_blocks,
                                        drawn=seed is None))

    def random_sample(self, fraction: float, *, seed: int | None = None) -> Dataset:
        """Each row kept with probability ``fraction`` (about ``fraction * count()`` rows).

        Like :meth:`random_shuffle`, a missing ``seed`` is drawn when the plan
        is built, so this Dataset gives the same rows every time it runs.

        >>> from airflowless import data
        >>> data.range(1000).random_sample(0.1, seed=0).count()
        96
        """
        from .sampling import RandomSampleFn

        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ConfigError(f"random_sample needs a fraction between 0 and 1, got {fraction!r}")
        return self._then(RandomSampleFn(float(fraction), _new_seed() if seed is None else seed))

    def sort(self, key: str | Sequence[str], descending: bool | Sequence[bool] = False) -> Dataset:
        """Rows ordered by ``key`` (one column or several); ``descending`` for all keys or one per key.

        Missing keys come last in both directions; rows with equal keys keep their order.

        >>> ds.sort(["day", "fare"], descending=[False, True])   # doctest: +SKIP
        """
        keys = (key,) if isinstance(key, str) else tuple(key)
        return Dataset(lo.Sort(self._plan, keys, _directions(keys, descending)))

    def groupby(self, key: str | Sequence[str]) -> GroupedData:
        return GroupedData(self, (key,) if isinstance(key, str) else tuple(key), Dataset)

    def union(self, *others: Dataset) -> Dataset:
        return Dataset(lo.Union((self._plan, *(o._plan for o in others))))

    def zip(self, other: Dataset) -> Dataset:
        """Columns of both side by side, row by row (same row counts); clashing names get ``_1``."""
        return Dataset(lo.Zip(self._plan, other._plan))

    def join(self, other: Dataset, on: str | Sequence[str] = ("id",), *, how: str | None = None,
             right_on: str | Sequence[str] | None = None, num_blocks: int | None = None,
             join_type: str | None = None, num_partitions: int | None = None) -> Dataset:
        """Rows of both matched on key columns; ``how`` is inner, left, right or outer.

        Ray's signature works too: ``join(ds, join_type="left_outer", on=("id",), right_on=("key",),
        num_partitions=8)`` (``inner``, ``left_outer``, ``right_outer``, ``full_outer``).
        """
        if join_type is not None:
            if how is not None:
                raise ConfigError("join takes how= or Ray's join_type=, not both")
            if join_type not in _RAY_JOIN_TYPES:
                raise ConfigError(f"join_type must be one of {sorted(_RAY_JOIN_TYPES)}, got {join_type!r}")
            how = _RAY_JOIN_TYPES[join_type]
        if num_partitions is not None:
            if num_blocks is not None:
                raise ConfigError("join takes num_blocks= or Ray's num_partitions=, not both")
            num_blocks = num_partitions
        how = how or "inner"
        if how not in ("inner", "left", "right", "outer"):
            raise ConfigError(f"join how must be inner, left, right or outer, got {how!r}")
        keys = (on,) if isinstance(on, str) else tuple(on)
        rkeys = None if right_on is None else ((right_on,) if isinstance(right_on, str) else tuple(right_on))
        return Dataset(lo.Join(self._plan, other._plan, keys, how, rkeys, num_blocks))

    # -- splits (these run the plan: they need row counts) ---------------------
    def materialize(self) -> Dataset:
        """Run the plan now and keep the blocks on the cluster."""
        return Dataset(materialized(self._plan))

    def train_test_split(self, test_size: float | int, *, shuffle: bool = False,
                         seed: int | None = None) -> tuple[Dataset, Dataset]:
        """(train, test): the last ``test_size`` (a fraction or a row count) of the rows go to test."""
        plan = self.random_shuffle(seed=_new_seed() if seed is None else seed)._plan if shuffle else self._plan
        train, test = splits.train_test_split(plan, test_size)
        return Dataset(train), Dataset(test)

    def split_at_indices(self, indices: Sequence[int]) -> list[Dataset]:
        return [Dataset(part) for part in splits.split_at_indices(self._plan, indices)]

    def split_proportionately(self, proportions: Sequence[float]) -> list[Dataset]:
        return [Dataset(part) for part in splits.split_proportionately(self._plan, proportions)]

    def streaming_split(self, n: int, *, equal: bool = False) -> list[Dataset]:
        """``n`` datasets that stream their own share of the rows (one per training rank).

        When the plan reads and then only transforms block by block, each part
        reads every ``n``-th input (nothing is materialized; a part is a plan
        and travels as one). Plans with an all-to-all step, or ``equal=True``
        (exactly equal row counts), cut by row position instead.
        """
        from .optimizer import optimize

        if n < 1:
            raise ConfigError(f"streaming_split needs n >= 1, got {n}")
        plan = optimize(self._plan)
        chain: list[lo.LogicalOp] = []
        node = plan
        while isinstance(node, (lo.Fused, lo.MapBlocks)):
            chain.append(node)
            node = node.input
        if equal or not isinstance(node, lo.Read) or node.limit is not None:
            return self.split(n, equal=equal)
        from connectors.memory import SubsetSource

        parts = []
        for i in range(n):
            part: lo.LogicalOp = lo.Read(SubsetSource(node.source, i, n), node.columns, node.filter, node.limit)
            for op in reversed(chain):
                part = op.with_inputs(part)
            parts.append(Dataset(part))
        return parts

    def split(self, n: int, *, equal: bool = False) -> list[Dataset]:
        return [Dataset(part) for part in splits.split(self._plan, n, equal=equal)]

    # -- consumers -----------------------------------------------------------
    def iter_internal_blocks(self) -> Iterator[pa.Table]:
        return iter_blocks(self._plan)

    def _iteration_tables(self) -> Iterator[pa.Table]:
        return iter_blocks(self._plan)  # iter_rows, iter_batches, iter_torch_batches: see .batches

    def take(self, limit: int = 20) -> list[dict[str, Any]]:
        return list(itertools.islice(Dataset(lo.Limit(self._plan, limit)).iter_rows(), limit))

    def take_all(self) -> list[dict[str, Any]]:
        return list(self.iter_rows())

    def take_batch(self, batch_size: int = 20, *, batch_format: str = "numpy") -> Any:
        table = concat(list(iter_blocks(lo.Limit(self._plan, batch_size))))
        return to_batch(table, batch_format)

    def show(self, limit: int = 20) -> None:
        for row in self.take(limit):
            print(row)

    def to_arrow(self) -> pa.Table:
        return concat(list(iter_blocks(self._plan)))

    def to_pandas(self, limit: int | None = None) -> Any:
        plan = self._plan if limit is None else lo.Limit(self._plan, limit)
        return concat(list(iter_blocks(plan))).to_pandas()

    def to_dask(self) -> Any:
        """A dask DataFrame over the blocks (they stay on the cluster)."""
        import dask.dataframe as dd

        materialized = self.materialize()
        plan = materialized._plan
        assert isinstance(plan, lo.FromBlocks)
        from distributed import get_client

        client = get_client()
        frames = [client.submit(lambda t: t.to_pandas(), b, pure=False) for b in plan.blocks]
        return dd.from_delayed(frames) if frames else dd.from_pandas(__import__("pandas").DataFrame(), npartitions=1)

    def num_blocks(self) -> int:
        """How many blocks this Dataset has (runs the plan unless it is already materialized).

        >>> from airflowless import data
        >>> data.range(100, parallelism=4).num_blocks()
        4
        """
        if isinstance(self._plan, lo.FromBlocks):
            return len(self._plan.blocks)
        return len(map_reduce(self._plan, lambda t: 1, "NumBlocks"))

    def count(self) -> int:
        return int(sum(map_reduce(self._plan, lambda t: t.num_rows, "Count")))

    def size_bytes(self) -> int:
        """The bytes of all blocks in memory (Arrow buffers), summed where the blocks are (runs the plan)."""
        return int(sum(map_reduce(self._plan, lambda t: t.nbytes, "SizeBytes")))

    def input_files(self) -> list[str]:
        """The files this Dataset reads, from its plan (no data is read); ``[]`` for data made in memory."""
        files: dict[str, None] = {}  # in order, once each
        pending = [self._plan]
        while pending:
            plan = pending.pop()
            if isinstance(plan, lo.Read):
                files.update(dict.fromkeys(str(f) for f in getattr(plan.source, "files", ())))
            pending += reversed(plan.inputs)
        return list(files)

    def schema(self) -> pa.Schema:
        plan = self._plan
        if isinstance(plan, lo.Read) and plan.columns is None and plan.source.schema() is not None:
            return plan.source.schema()
        blocks = list(iter_blocks(lo.Limit(plan, 1)))
        if blocks:
            return blocks[0].schema
        return concat(list(iter_blocks(plan))).schema

    def columns(self) -> list[str]:
        return list(self.schema().names)

    def aggregate(self, *aggs: AggregateFn) -> dict[str, Any]:
        """Whole-dataset aggregates, e.g. ``ds.aggregate(Min("x"), Max("x"))``."""
        tables = list(iter_blocks(lo.Aggregate(self._plan, (), tuple(aggs))))
        row = tables[0].to_pylist()[0] if tables and tables[0].num_rows else {}
        return {a.output_name: row.get(a.output_name) for a in aggs}

    def sum(self, on: str, ignore_nulls: bool = True) -> Any:
        return self.aggregate(Sum(on, ignore_nulls=ignore_nulls))[f"sum({on})"]

    def min(self, on: str, ignore_nulls: bool = True) -> Any:
        return self.aggregate(Min(on, ignore_nulls=ignore_nulls))[f"min({on})"]

    def max(self, on: str, ignore_nulls: bool = True) -> Any:
        return self.aggregate(Max(on, ignore_nulls=ignore_nulls))[f"max({on})"]

    def mean(self, on: str, ignore_nulls: bool = True) -> Any:
        return self.aggregate(Mean(on, ignore_nulls=ignore_nulls))[f"mean({on})"]

    def std(self, on: str, ddof: int = 1, ignore_nulls: bool = True) -> Any:
        return self.aggregate(Std(on, ddof=ddof, ignore_nulls=ignore_nulls))[f"std({on})"]

    def unique(self, column: str) -> list[Any]:
        grouped = concat(list(iter_blocks(lo.Aggregate(self._plan, (column,), (Count(),)))))
        return grouped.column(column).to_pylist()

    def write_parquet(self, path: str, **storage_options: Any) -> list[str]:
        from connectors import get_sink

        return self.write_datasink(get_sink("parquet")(path, storage_options or None))

    def write_csv(self, path: str, **storage_options: Any) -> list[str]:
        """One ``part-NNNNN.csv`` per block under the folder ``path`` (local or fsspec URL)."""
        from connectors import get_sink

        return self.write_datasink(get_sink("csv")(path, storage_options or None))

    def write_json(self, path: str, **storage_options: Any) -> list[str]:
        """One ``part-NNNNN.jsonl`` (JSON lines) per block under the folder ``path``."""
        from connectors import get_sink

        return self.write_datasink(get_sink("json")(path, storage_options or None))

    def write_sql(self, table: str, connection_url: str, *, if_exists: str = "append") -> None:
        """Append the rows to ``table``; ``if_exists`` is "append", "replace" (drop first) or "fail"."""
        from connectors import get_sink

        self.write_datasink(get_sink("sql")(table, connection_url, if_exists=if_exists))

    def write_datasink(self, sink: Any) -> list[str]:
        """Write every block with ``sink``: one task per block, on the worker holding it."""
        from .consume import _execution
        from .execution.executor import stream
        from .optimizer import optimize
        from .physical.lowering import lower

        sink.prepare()
        with _execution(self._plan) as ex:
            writes: list[Any] = []
            for future in stream(ex, lower(optimize(self._plan)), fetch=False):
                writes.append(ex.client.submit(sink.write, future, len(writes), pure=False,
                                               key=f"Write{sink.name.capitalize()}-{uuid.uuid4().hex}"))
            results = ex.client.gather(writes) if writes else []
        sink.on_complete(results)
        return [r.path for r in results if getattr(r, "path", None)]

    # -- plans and statistics -----------------------------------------------------
    def explain(self) -> str:
        """The logical, optimized and physical plans, as text."""
        from .optimizer import optimize
        from .physical.lowering import lower
        from .physical.operators import render as render_physical

        optimized = optimize(self._plan)
        text = ("-- logical plan --\n" + render(self._plan) + "\n\n-- optimized plan --\n" + render(optimized)
                + "\n\n-- physical plan --\n" + render_physical(lower(optimized)))
        print(text)
        return text

    def stats(self) -> DatasetStats:
        """Per-operator tasks, blocks, rows, bytes and time of this Dataset's latest execution in this process
        (as Ray's, it runs nothing: before the Dataset ran, it says so).

        A ``str`` (print it for the table) whose ``.plot()`` charts time and rows per operator.
        """
        ex = execution_of(self._plan)
        if ex is None:
            return DatasetStats.empty()
        return DatasetStats.of([OperatorStats(s.name, s.tasks, s.blocks, s.rows, s.bytes, s.wall_s)
                                for s in ex.stats.values()], peak_held_bytes=ex.peak_held_bytes, budget=ex.budget)

    def __repr__(self) -> str:
        return f"Dataset(plan={self._plan.label})"

    def _repr_html_(self) -> str:
        return f"<b>Dataset</b><pre>{html.escape(render(self._plan))}</pre>"

    def __dask_tokenize__(self) -> str:
        import hashlib

        import cloudpickle

        return hashlib.sha256(cloudpickle.dumps(self._plan)).hexdigest()


_RAY_JOIN_TYPES = {"inner": "inner", "left_outer": "left", "right_outer": "right", "full_outer": "outer"}


def _new_seed() -> int:
    import random

    return random.randrange(2**31)



def _directions(keys: tuple[str, ...], descending: bool | Sequence[bool]) -> tuple[bool, ...]:
    """``descending`` as one flag per sort key (as Ray and pandas take it)."""
    if isinstance(descending, bool):
        return (descending,) * len(keys)
    flags = tuple(descending) if isinstance(descending, Sequence) and not isinstance(descending, str) else None
    if flags is None or not all(isinstance(f, bool) for f in flags):
        raise UsageError(f"sort descending must be a bool or a list of bools, one per key; got {descending!r}")
    if len(flags) != len(keys):
        raise ConfigError(f"sort got {len(flags)} descending flag(s) for {len(keys)} key(s) {list(keys)}; "
                         "give one per key, or one bool for all")
    return flags
