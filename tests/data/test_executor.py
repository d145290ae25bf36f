"""The streaming executor on a real cluster: backpressure, early stop, stalls, bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflowless import data
from airflowless.data import DataContext, StallError
from airflowless.data.block import BatchTypeError
from airflowless.data.consume import last_execution
from airflowless.data.transforms import ColumnNotFoundError, UserCodeError
from tests.support.eventually import eventually

pytestmark = pytest.mark.usefixtures("cluster_client")


@pytest.fixture
def context() -> Iterator[DataContext]:
    ctx = DataContext.get_current()
    saved = dict(vars(ctx))
    yield ctx
    for key, value in saved.items():
        setattr(ctx, key, value)


def _big_block(batch: dict) -> dict:
    ids = batch["id"]
    return {"id": ids, "payload": np.ones((len(ids), 16), dtype=np.float64).sum(axis=1)}


def test_memory_budget_bounds_the_blocks_held(context: DataContext) -> None:
    block_bytes = 25_000 * 16  # two 8-byte columns per row
    context.memory_budget_bytes = 3 * block_bytes
    ds = data.range(25_000 * 12, parallelism=12).map_batches(_big_block)
    seen = sum(len(b["id"]) for b in ds.iter_batches(batch_size=None))
    assert seen == 25_000 * 12
    ex = last_execution()
    assert ex is not None
    assert 0 < ex.peak_held_bytes <= context.memory_budget_bytes
    assert ex.window(block_bytes) == 3


def _tasks_of(client, part: str) -> list[str]:  # noqa: ANN001
    """Keys naming ``part`` that the scheduler or a worker still holds (a cancelled task runs to its end)."""
    on_scheduler = client.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks])
    on_workers = client.run(lambda dask_worker: [str(k) for k in dask_worker.state.tasks])
    return [k for k in [*on_scheduler, *(k for keys in on_workers.values() for k in keys)] if part in k]


def _touch(batch: dict, folder: str) -> dict:
    time.sleep(0.3)  # a slow block: the consumer stops while the others wait
    Path(folder, f"block-{int(batch['id'][0])}").touch()
    return batch


def test_a_consumer_that_stops_early_cancels_the_rest(context: DataContext, tmp_path: Path,
                                                       cluster_client) -> None:  # noqa: ANN001
    context.max_tasks_in_flight_per_op = 2
    ds = data.range(40, parallelism=40).map_batches(_touch, fn_args=(str(tmp_path),))
    for _ in ds.iter_batches(batch_size=None):
        break
    # every block task started so far has ended and none is left to start: the count below is final
    eventually(lambda: not _tasks_of(cluster_client, "_touch"), message=lambda: str(_tasks_of(cluster_client, "_touch")))
    ran = len(list(tmp_path.iterdir()))
    assert ran <= 6, f"{ran} of 40 blocks ran after the consumer stopped after one"


def _stuck(batch: dict, release: str) -> dict:
    eventually(lambda: Path(release).exists(), timeout=120)  # no progress at all until the test saw the stall
    return batch


def test_a_stall_names_the_operator(context: DataContext, tmp_path: Path, cluster_client) -> None:  # noqa: ANN001
    context.stall_timeout_s = 1.5
    release = tmp_path / "release"
    ds = data.range(4, parallelism=2).map_batches(_stuck, fn_args=(str(release),))
    try:
        with pytest.raises(StallError, match=r"operator 'ReadRange\+MapBatches\(_stuck\)\+Count' made no progress.*running on"):
            ds.count()
    finally:
        release.touch()
    eventually(lambda: not _tasks_of(cluster_client, "_stuck"))  # the workers are free again


def _wrong_type(batch: dict) -> list:
    return [1, 2, 3]


def _raises(batch: dict) -> dict:
    raise ZeroDivisionError("bad row")


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    ds = data.range(10)
    with pytest.raises(BatchTypeError, match=r"MapBatches\(_wrong_type\) returned list"):
        ds.map_batches(_wrong_type).count()
    with pytest.raises(UserCodeError, match=r"MapBatches\(_raises\) raised ZeroDivisionError: bad row"):
        ds.map_batches(_raises).count()
    with pytest.raises(ColumnNotFoundError, match=r"column\(s\) \['nope'\] not found"):
        ds.select_columns(["nope"]).count()
    with pytest.raises(ColumnNotFoundError, match="nope"):
        ds.groupby("nope").count().to_pandas()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.read_parquet(str(tmp_path / "missing"))
    pq.write_table(pa.table({"a": [1]}), tmp_path / "one.parquet")
    with pytest.raises(ValueError, match=r"column 'b' is not in the parquet data"):
        data.read_parquet(str(tmp_path), columns=["b"]).count()
    (tmp_path / "two.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"two.parquet"):
        data.read_parquet(str(tmp_path)).count()
    (tmp_path / "two.parquet").unlink()
    pq.write_table(pa.table({"a": ["text"]}), tmp_path / "three.parquet")
    with pytest.raises(ValueError, match=r"three.parquet.*does not match the schema"):
        data.read_parquet(str(tmp_path)).count()
    with pytest.raises(ValueError, match="batch_format must be one of"):
        ds.map_batches(_raises, batch_format="polars")
