"""Optimizer rules, each alone and together: plans compared, no cluster needed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflowless import data
from airflowless.data.expressions import columns_read
from airflowless.data.logical import operators as lo
from airflowless.data.optimizer import (
    apply_rule,
    drop_noops,
    fuse_maps,
    optimize,
    push_filter,
    push_limit,
    push_projection,
)
from airflowless.data.physical.lowering import lower
from airflowless.data.physical.operators import BarrierOp, LimitOp, MapOp, ReadOp


@pytest.fixture
def parquet_dir(tmp_path: Path) -> str:
    for i in range(3):
        pq.write_table(pa.table({"a": [i, i + 1], "b": [1.0, 2.0], "c": ["x", "y"]}), tmp_path / f"p{i}.parquet")
    return str(tmp_path)


def _double(batch):  # noqa: ANN001, ANN202
    return batch


def test_fuse_maps_makes_one_fused_node(parquet_dir: str) -> None:
    ds = data.read_parquet(parquet_dir).map_batches(_double).map_batches(_double).rename_columns({"a": "z"})
    plan = apply_rule(ds.plan, fuse_maps.rule)
    assert isinstance(plan, lo.Fused) and isinstance(plan.input, lo.Read)
    assert [t.name for t in plan.transforms] == ["MapBatches(_double)", "MapBatches(_double)", "RenameColumns(a->z)"]


def test_projection_is_pushed_into_the_reader(parquet_dir: str) -> None:
    plan = apply_rule(data.read_parquet(parquet_dir).select_columns(["a", "b"]).plan, push_projection.rule)
    assert isinstance(plan, lo.Read) and plan.columns == ("a", "b")


def test_projection_moves_below_an_expression_filter_it_covers(parquet_dir: str) -> None:
    ds = data.read_parquet(parquet_dir).filter(expr=data.col("a") > 0).select_columns(["a"])
    plan = optimize(ds.plan)
    assert isinstance(plan, lo.Read)
    assert plan.columns == ("a",) and str(plan.filter) == "(a > 0)"


@pytest.mark.parametrize("name", ["1x", "a b", "é", "x.y", "and"])
def test_a_selection_stays_above_a_filter_on_a_column_it_drops_whatever_its_name(name: str) -> None:
    """Moved below the filter, the selection would drop the column the filter reads and fail valid code: it did
    for names the printed expression hides (``(1x > 1)`` read as no column, ``(a b > 1)`` as ``a`` and ``b``)."""
    ds = data.from_arrow(pa.table({name: [1, 2, 3], "v": [10, 20, 30]}))
    def order(columns: list[str]) -> list[str]:
        plan = optimize(ds.filter(expr=data.col(name) > 1).select_columns(columns).plan)
        assert isinstance(plan, lo.Fused), plan
        return [type(transform).__name__ for transform in plan.transforms]

    assert order(["v"]) == ["FilterFn", "ProjectFn"]
    assert order([name, "v"]) == ["ProjectFn", "FilterFn"]  # it covers the filter's column: it moves


def test_a_filter_whose_columns_cannot_be_told_moves_nothing(parquet_dir: str) -> None:
    ds = data.from_arrow(pa.table({"a": [1, 2], "v": [3, 4]})).filter(expr=pc.field(0) > 1)  # by position
    plan = optimize(ds.select_columns(["v"]).plan)
    assert isinstance(plan, lo.Fused) and [type(t).__name__ for t in plan.transforms] == ["FilterFn", "ProjectFn"]
    read = optimize(data.read_parquet(parquet_dir).select_columns(["a", "b"]).filter(expr=pc.field(0) > 1).plan)
    assert isinstance(read, lo.Fused) and isinstance(read.input, lo.Read) and read.input.filter is None


def test_a_filter_on_a_column_the_read_drops_stays_out_of_the_reader(tmp_path: Path) -> None:
    pq.write_table(pa.table({"1x": [1, 2], "v": [3, 4]}), tmp_path / "p.parquet")
    plan = optimize(data.read_parquet(str(tmp_path)).select_columns(["v"]).filter(expr=data.col("1x") > 1).plan)
    assert isinstance(plan, lo.Fused) and isinstance(plan.input, lo.Read) and plan.input.filter is None


def test_columns_read_names_each_column_exactly() -> None:
    assert columns_read('x > 1.5 and name == "y" and not (z in [1, 2])') == {"x", "name", "z"}
    assert columns_read(data.col("a b") + data.col("1x") > data.lit(0)) == {"a b", "1x"}
    assert columns_read(pc.field("s", "t") == pc.field("u")) == {"s", "u"}  # a nested reference's column
    assert columns_read(pc.field("q").cast(pa.int8()) == 1) == {"q"}  # a function's options are no column
    assert columns_read(pc.scalar(True)) == set()
    assert columns_read(pc.field(0) > 1) is None  # by position: not told, so nothing moves past it


def test_function_filters_are_not_pushed(parquet_dir: str) -> None:
    ds = data.read_parquet(parquet_dir).filter(lambda row: row["a"] > 0)
    assert apply_rule(ds.plan, push_filter.rule) is ds.plan


def test_filters_combine_in_the_reader(parquet_dir: str) -> None:
    ds = data.read_parquet(parquet_dir, filter=data.col("a") > 0).filter(expr=data.col("b") < 2)
    plan = apply_rule(ds.plan, push_filter.rule)
    assert isinstance(plan, lo.Read) and columns_read(plan.filter) == {"a", "b"}


def test_a_filter_after_a_selection_still_reaches_the_reader(parquet_dir: str) -> None:
    plan = optimize(data.read_parquet(parquet_dir).select_columns(["a", "b"]).filter(expr=data.col("a") > 1).plan)
    assert isinstance(plan, lo.Read) and plan.columns == ("a", "b") and columns_read(plan.filter) == {"a"}


@pytest.mark.parametrize("text", ["b > 1.5", 'c == "x" and b < 2.5', "a % 2.5 == 1"])
def test_float_and_string_literals_name_no_columns(parquet_dir: str, text: str) -> None:
    """A float literal prints as a cast with options (``{to_type=double, ...}``), a string as its text: neither
    is a column, so a filter with them after a selection still reaches the reader."""
    ds = data.read_parquet(parquet_dir).select_columns(["a", "b", "c"]).filter(expr=text)
    plan = optimize(ds.plan)
    assert isinstance(plan, lo.Read) and plan.filter is not None, plan
    assert columns_read(plan.filter) <= {"a", "b", "c"}


def test_limit_moves_below_row_preserving_maps_and_into_the_reader(parquet_dir: str) -> None:
    ds = data.read_parquet(parquet_dir).rename_columns({"a": "z"}).limit(5).limit(3)
    plan = apply_rule(ds.plan, push_limit.rule)
    assert isinstance(plan, lo.MapBlocks)
    limit = plan.input
    assert isinstance(limit, lo.Limit) and limit.n == 3
    assert isinstance(limit.input, lo.Read) and limit.input.limit == 3


def test_limit_stays_above_maps_that_change_row_counts(parquet_dir: str) -> None:
    ds = data.read_parquet(parquet_dir).map_batches(_double).limit(2)
    assert apply_rule(ds.plan, push_limit.rule) is ds.plan


def test_drop_noops(parquet_dir: str) -> None:
    base = data.read_parquet(parquet_dir)
    plan = apply_rule(base.select_columns(["a", "b"]).select_columns(["a"]).plan, drop_noops.rule)
    assert isinstance(plan, lo.MapBlocks) and plan.transform.columns == ("a",)
    assert isinstance(plan.input, lo.Read)
    sorted_plan = apply_rule(base.random_shuffle(seed=1).sort("a").plan, drop_noops.rule)
    assert isinstance(sorted_plan, lo.Sort) and isinstance(sorted_plan.input, lo.Read)
    again = apply_rule(base.repartition(4).repartition(2).plan, drop_noops.rule)
    assert isinstance(again, lo.Repartition) and again.num_blocks == 2 and isinstance(again.input, lo.Read)


def test_lowering_fuses_the_read_with_the_chain(parquet_dir: str) -> None:
    ds = data.read_parquet(parquet_dir).map_batches(_double).filter(expr=data.col("a") > 0)
    physical = lower(optimize(ds.plan))
    assert isinstance(physical, ReadOp)
    assert physical.name == "ReadParquet+MapBatches(_double)+Filter((a > 0))"
    assert len(physical.read_tasks) == 3
    shuffled = lower(optimize(ds.random_shuffle(seed=0).map_batches(_double).limit(1).plan))
    assert isinstance(shuffled, LimitOp) and isinstance(shuffled.input, MapOp)
    assert isinstance(shuffled.input.input, BarrierOp)


def test_explain_shows_the_three_plans(parquet_dir: str) -> None:
    text = data.read_parquet(parquet_dir).select_columns(["a"]).explain()
    assert "-- logical plan --\nProject(a)\n  <- ReadParquet" in text
    assert "-- optimized plan --\nReadParquet[columns=['a']]" in text
    assert "-- physical plan --\nReadOp[ReadParquet]" in text


def test_a_gpu_map_runs_alone_and_asks_for_its_gpu(parquet_dir: str) -> None:
    ds = (data.read_parquet(parquet_dir).map_batches(_double)
          .map_batches(_double, num_gpus=1).map_batches(_double).limit(2))
    physical = lower(optimize(ds.plan))
    assert isinstance(physical, LimitOp)
    after, gpu, read = physical.input, physical.input.input, physical.input.input.input  # type: ignore[attr-defined]
    assert isinstance(after, MapOp) and not after.resources  # the CPU map after it: a task of its own
    assert isinstance(gpu, MapOp) and gpu.resources == {"GPU": 1.0} and len(gpu.transforms) == 1
    assert isinstance(read, ReadOp) and len(read.transforms) == 1  # the CPU map before it stays with the read
    # a GPU map right after the read is not fused into it either (reads need no GPU)
    alone = lower(optimize(data.read_parquet(parquet_dir).map_batches(_double, num_gpus=0.5).plan))
    assert isinstance(alone, MapOp) and alone.resources == {"GPU": 0.5} and isinstance(alone.input, ReadOp)
    with pytest.raises(ValueError, match=r"num_gpus=...\) must be a number >= 0, got -1"):
        data.read_parquet(parquet_dir).map_batches(_double, num_gpus=-1)
