"""A first pass over data imports only what it must: a driver that plans a read and a filter and iterates numpy
batches never imports pandas, literals are what pyarrow would make of them, and the embedded cluster's workers
import pyarrow's dataset reader and pandas before their first task (or at it, with AIRFLOWLESS_WARM_WORKERS=0)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflowless import data
from airflowless.data.block import to_batch
from airflowless.data.expressions import _scalar, col, lit, to_arrow

LITERALS = [True, False, 0, -1, 2**63 - 1, -2**63, 1.5, -0.0, 1e300, float("inf"), "", "héllo", None,
            datetime.date(2026, 1, 2), b"raw"]


@pytest.mark.parametrize("value", LITERALS, ids=repr)
def test_a_literal_built_from_its_bytes_is_what_pyarrow_makes_of_it(value: object) -> None:
    made = pc.scalar(value)
    assert _scalar(value).equals(made.cast(pa.float64()) if isinstance(value, float) else made)


def test_a_literal_past_64_bits_is_pyarrows_error() -> None:
    with pytest.raises(OverflowError):
        _scalar(2**64)


def test_a_float_literal_beside_an_integer_column_compares_in_float64() -> None:
    """Arrow alone binds 1.0 as float32 and casts the int64 column to it, failing past 2**24."""
    table = pa.table({"id": pa.array([2**24 + 1, 3, 2**53], pa.int64()), "x": pa.array([0.5, 1.5, 2.5], pa.float32()),
                      "s": ["1.5", "a", "b"]})

    def ids(expr: object) -> list[int]:
        return table.filter(to_arrow(expr))["id"].to_pylist()

    assert ids("id > 1.0") == ids("1.0 < id") == ids(col("id") > 1.0) == [2**24 + 1, 3, 2**53]
    assert ids(col("id") > lit(1.0)) == ids(lit(1.0) < col("id")) == [2**24 + 1, 3, 2**53]
    assert ids("id + 0.5 == 16777217.5") == [2**24 + 1]  # in float32 the sum would be 16777218
    assert ids(0.5 + col("id") == 16777217.5) == ids(col("id") + lit(0.5) == 16777217.5) == [2**24 + 1]
    assert ids("x > 1.0") == ids(2.0 * col("x") > 2) == [3, 2**53]
    assert ids("x * 2 == 3") == [3]
    with pytest.raises(pa.ArrowNotImplementedError, match="no kernel"):  # text is not read as a number
        ids("s == 1.5")
    assert "Filter((id > 0.5))" in data.range(3).filter(expr="id > 0.5").explain()  # the literal's cast unsaid


def _columns(draw_rows: int, offset: int) -> pa.Table:
    rng = np.random.default_rng(draw_rows + offset)
    ints = rng.integers(-100, 100, draw_rows)
    table = pa.table({
        **{str(t): pa.array(ints).cast(t) for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())},
        **{str(t): pa.array(np.abs(ints)).cast(t) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())},
        "float16": pa.array(ints.astype(np.float16)),
        "float32": pa.array(ints.astype(np.float32)),
        "float64": pa.array(rng.random(draw_rows)),
        "ts": pa.array(ints, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        "ns": pa.array(ints, pa.int64()).cast(pa.timestamp("ns")),
        "dur": pa.array(ints, pa.int64()).cast(pa.duration("s")),
        "bool": pa.array(ints > 0),
        "nulls": pa.array([None if v % 3 == 0 else int(v) for v in ints], pa.int64()),
        "str": pa.array([str(v) for v in ints]),
    })
    return table.slice(offset)


@pytest.mark.parametrize(("rows", "offset"), [(0, 0), (1, 0), (9, 3), (64, 8), (100, 13), (100, 100), (5000, 4093)])
def test_numpy_columns_are_pyarrows_conversion(rows: int, offset: int) -> None:
    """to_batch's numpy columns, made by numpy from Arrow's buffers: pyarrow's values, types, shapes and
    writability, for every width of number, times, booleans (bits) and slices that start mid-byte."""
    table = _columns(rows, min(offset, rows))
    got = to_batch(table, "numpy")
    for name in table.column_names:
        expected = table.column(name).to_numpy()
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        assert got[name].flags.writeable == expected.flags.writeable, name
        assert np.array_equal(got[name], expected, equal_nan=expected.dtype.kind == "f"), name


def _in_fresh_process(code: str, tmp_path: Path, **env: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_driver_reads_filters_and_iterates_numpy_batches_without_pandas(tmp_path: Path) -> None:
    expected = 0
    for i in range(3):
        x, ok, v = np.arange(20_000, dtype=np.int64) + i, np.arange(20_000) % 2 == 0, np.arange(20_000) * 0.5
        pq.write_table(pa.table({"x": x, "ok": ok, "v": v}), tmp_path / f"part-{i}.parquet")
        expected += int(((x >= 10) & (v > 1.5) & ok).sum())
    code = f"""
    import json, sys
    import airflowless
    from airflowless import data
    client = airflowless.init(n_workers=2, quiet=True, dashboard_address=None)
    warm = client.run(lambda: "pyarrow.dataset" in __import__("sys").modules)
    ds = data.read_parquet({str(tmp_path)!r}).map_batches(lambda t: t, batch_format="pyarrow")
    ds = ds.filter(expr="x >= 10 and v > 1.5 and ok == True")
    rows = sum(len(b["x"]) for b in ds.iter_batches(batch_size=4096, batch_format="numpy"))
    pushed = data.read_parquet({str(tmp_path)!r}).filter(expr="x >= 10 and v > 1.5 and ok == True")
    assert "filter=" in pushed.explain()  # into the read: the workers filter as they read
    assert sum(len(b["x"]) for b in pushed.iter_batches(batch_size=4096, batch_format="numpy")) == rows
    print(json.dumps({{"rows": rows, "pandas": "pandas" in sys.modules, "warm": list(warm.values())}}))
    airflowless.shutdown()
    """
    result = _in_fresh_process(code, tmp_path, AIRFLOWLESS_WARM_WORKERS="0")
    assert result == {"rows": expected, "pandas": False, "warm": [False, False]}


def test_the_embedded_workers_import_datas_libraries_before_their_first_task(tmp_path: Path) -> None:
    """No task runs: a fresh cluster's workers hold pyarrow's dataset reader and pandas within a few seconds, and
    a process they fork meanwhile is not left holding a half-made import."""
    code = """
    import json, os, signal, sys, time
    import airflowless
    client = airflowless.init(n_workers=2, quiet=True, dashboard_address=None)

    def fork_then_look():  # at once: the background imports are likely still running
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # a hang ends the child with SIGALRM
            import pandas  # hangs where the fork took a module lock mid-import
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        return status

    forked = client.run(fork_then_look)
    deadline = time.monotonic() + 30
    while True:
        loaded = client.run(lambda: all(name in sys.modules for name in ("pyarrow.dataset", "pandas")))
        if all(loaded.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    print(json.dumps({"loaded": list(loaded.values()), "forked": list(forked.values())}))
    airflowless.shutdown()
    """
    result = _in_fresh_process(code, tmp_path, AIRFLOWLESS_WARM_WORKERS="1")
    assert result == {"loaded": [True, True], "forked": [0, 0]}


def test_a_task_importing_data_while_the_background_imports_run_finds_whole_modules() -> None:
    """A worker's loop thread unpickles tasks, importing Data's modules, while the warm thread imports. Had that
    thread imported Data's own modules (which import each other), the loop thread met a half-made module or
    Python's import deadlock error (1 of 3 script runs in CI). Ten fresh processes import both at once."""
    code = textwrap.dedent("""
        import distributed
        from airflowless.runtime import worker_main
        worker_main._start_warm_imports()
        import airflowless.data.consume, airflowless.data.physical.tasks, connectors.parquet, pyarrow.dataset
    """)
    for _ in range(10):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
