"""Blocks handed to the consumer through /dev/shm (airflowless.data.execution.handoff), on a real cluster.

The same answers as through Dask's sockets; the inbox private to its user; and
nothing left in /dev/shm when a consumer finishes, stops early, loses a worker
to SIGKILL mid-stream, or is SIGKILLed itself (the next consumer's sweep).
"""

from __future__ import annotations

import fcntl
import glob
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflowless import data
from airflowless.data import DataContext
from airflowless.data.consume import last_execution
from airflowless.data.execution import handoff
from tests.support.eventually import eventually

pytestmark = pytest.mark.skipif(not os.path.isdir(handoff.ROOT), reason="this host has no /dev/shm")


def _wide(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """About 3 MB a block of 100,000 rows: over DataContext.shared_memory_min_bytes."""
    ids = batch["id"]
    return {"id": ids, "x": ids * 0.5, "y": ids % 7, "name": np.array([f"r{i}" for i in ids], dtype=object)}


def _leftovers(box: handoff.Inbox) -> list[str]:
    """The files in ``box`` that hold blocks (written, or half-written), not its token or marks."""
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(box.path, "*"))
                  if p.endswith(".arrow") or ".tmp-" in p)


@pytest.fixture
def context() -> Iterator[DataContext]:
    ctx = DataContext.get_current()
    saved = ctx.shared_memory_blocks
    yield ctx
    ctx.shared_memory_blocks = saved


def _batches(ds: data.Dataset) -> list[dict[str, np.ndarray]]:
    return list(ds.iter_batches(batch_size=30_000))


def test_blocks_come_through_shared_memory_with_the_same_answer(context: DataContext, cluster_client) -> None:  # noqa: ANN001
    ds = data.range(400_000, parallelism=4).map_batches(_wide).filter(expr="y != 3")
    context.shared_memory_blocks = False
    through_dask = _batches(ds)
    assert last_execution().shared_blocks == 0
    context.shared_memory_blocks = True
    through_shm = _batches(ds)
    assert last_execution().shared_blocks == 4
    assert len(through_shm) == len(through_dask) > 4
    for a, b in zip(through_shm, through_dask, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name
    box = handoff.inbox()
    assert box is not None and _leftovers(box) == []


def test_blocks_a_barrier_makes_come_through_dask(context: DataContext, cluster_client) -> None:  # noqa: ANN001
    ds = data.range(300_000, parallelism=3).map_batches(_wide).random_shuffle(seed=1)
    rows = sorted(int(i) for b in _batches(ds) for i in b["id"])
    assert rows == list(range(300_000))
    assert last_execution().shared_blocks == 0  # only the task that makes a block writes it (no task more)


def test_small_blocks_travel_through_dask(context: DataContext, cluster_client) -> None:  # noqa: ANN001
    assert [r["id"] for r in data.range(20, parallelism=4).take_all()] == list(range(20))
    assert last_execution().shared_blocks == 0


def test_a_consumer_that_stops_early_leaves_no_block_behind(context: DataContext, cluster_client) -> None:  # noqa: ANN001
    ds = data.range(1_600_000, parallelism=16).map_batches(_wide)
    for _ in ds.iter_batches(batch_size=1000):
        break
    box = handoff.inbox()
    # the blocks in flight when it stopped: their files are removed by abandon(), or by their writers
    eventually(lambda: _leftovers(box) == [], timeout=30, message=f"no block files left in {box.path}")


def test_the_inbox_is_private_to_its_user() -> None:
    box = handoff.inbox()
    assert box is not None
    for folder in (box.path, os.path.dirname(box.path)):
        mode = os.stat(folder).st_mode
        assert stat.S_IMODE(mode) == 0o700 and os.stat(folder).st_uid == os.getuid(), folder


class _Labelled(pa.ExtensionType):
    def __init__(self) -> None:
        super().__init__(pa.int64(), "airflowless.test.labelled")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _Labelled:
        return cls()


def _write_elsewhere(table: pa.Table, folder: str, token: str, min_bytes: int, key: str,
                     headroom: int | None = None) -> object:
    """write_block as a worker runs it (in this test's process it always returns the table)."""
    kept = handoff.HEADROOM_BYTES
    handoff.HEADROOM_BYTES = kept if headroom is None else headroom
    try:
        return handoff.write_block(table, folder, token, min_bytes, key)
    finally:
        handoff.HEADROOM_BYTES = kept


def test_a_worker_writes_only_into_an_inbox_it_may_and_can_give_back(tmp_path: Path, cluster_client) -> None:  # noqa: ANN001
    table = pa.table({"x": np.arange(500_000)})
    box = handoff.inbox()

    def elsewhere(*args: object, **kwargs: object) -> object:
        return cluster_client.submit(_write_elsewhere, *args, **kwargs, pure=False).result()

    assert handoff.write_block(table, box.path, box.token, 0, "here") is table  # the consumer's own process
    assert isinstance(elsewhere(table, box.path, "another consumer's token", 0, "a"), pa.Table)
    assert isinstance(elsewhere(table, str(tmp_path / "not there"), box.token, 0, "b"), pa.Table)
    assert isinstance(elsewhere(table, box.path, box.token, table.nbytes + 1, "c"), pa.Table)
    labelled = pa.table({"x": pa.ExtensionArray.from_storage(_Labelled(), pa.array(np.arange(500_000)))})
    assert isinstance(elsewhere(labelled, box.path, box.token, 0, "d"), pa.Table)
    free = os.statvfs(box.path)
    assert isinstance(elsewhere(table, box.path, box.token, 0, "e", free.f_bavail * free.f_frsize), pa.Table)
    assert _leftovers(box) == []
    key = "a key/with a slash " + "and a long name " * 20
    shared = elsewhere(table, box.path, box.token, 0, key)
    assert isinstance(shared, handoff.SharedBlock) and shared.rows == 500_000
    assert box.open(shared, key).equals(table) and _leftovers(box) == []
    again = elsewhere(table, box.path, box.token, 0, "run twice")  # a first run whose worker then died ...
    assert box.open(table, "run twice") is table and _leftovers(box) == []  # ... and a second elsewhere
    assert isinstance(again, handoff.SharedBlock)


def test_a_writer_that_died_mid_write_is_tidied() -> None:
    box = handoff.inbox()
    half = Path(box.path) / "some-block.tmp-dead"  # its writer's lock went with the writer
    half.write_bytes(b"half a block")
    busy = Path(box.path) / "other-block.tmp-busy"
    busy.write_bytes(b"being written")
    young = Path(box.path) / "new-block.tmp-young"  # made a moment ago: its writer may not hold it yet
    young.write_bytes(b"")
    for old in (half, busy):
        os.utime(old, (os.stat(old).st_atime - 60, os.stat(old).st_mtime - 60))
    with open(busy, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live writer's
        box.tidy()
    assert not half.exists() and busy.exists() and young.exists()
    busy.unlink()
    young.unlink()


def test_a_block_whose_column_changes_dictionary_comes_through(context: DataContext, cluster_client) -> None:  # noqa: ANN001
    parts = [pa.DictionaryArray.from_arrays(pa.array(np.arange(200_000) % 3, pa.int32()),
                                            pa.array([f"{p}-a", f"{p}-b", f"{p}-c"])) for p in "xy"]
    table = pa.table({"d": pa.chunked_array(parts), "n": np.arange(400_000)})  # one column, two dictionaries
    context.shared_memory_min_bytes = 0
    try:
        got = data.from_arrow([table]).map_batches(lambda t: t, batch_format="pyarrow").to_arrow()
    finally:
        context.shared_memory_min_bytes = DataContext().shared_memory_min_bytes
    assert last_execution().shared_blocks == 1
    assert got.column("d").to_pylist() == table.column("d").to_pylist()


def test_operator_names_that_are_no_file_names_still_hand_off(context: DataContext, cluster_client) -> None:  # noqa: ANN001
    ds = data.range(200_000, parallelism=2).map_batches(_wide).filter(expr="x / 2 >= 0")  # a "/" in each key
    assert sum(len(b["id"]) for b in _batches(ds)) == 200_000
    assert last_execution().shared_blocks == 2


SLOW_STREAM = """\
import os, signal, sys, time
import numpy as np
import airflowless
from airflowless import data
from airflowless.data.consume import last_execution
from airflowless.data.execution import handoff

def wide(batch):
    time.sleep(0.3)
    ids = batch["id"]
    return {"id": ids, "x": ids * 0.5}

client = airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
box = handoff.inbox()
print("INBOX", box.path, flush=True)
mode = sys.argv[1]
workers = client.run(os.getpid)
total, killed = 0, False
for batch in data.range(2_400_000, parallelism=24).map_batches(wide).iter_batches(batch_size=50_000):
    total += int(batch["id"].sum())
    if not killed:
        killed = True
        if mode == "worker":
            os.kill(sorted(workers.values())[0], signal.SIGKILL)
        else:
            print("STREAMING", flush=True)
            time.sleep(600)
print("TOTAL", total, last_execution().shared_blocks, flush=True)
print("LEFT", sorted(f for f in os.listdir(box.path) if f.endswith(".arrow") or ".tmp-" in f), flush=True)
airflowless.shutdown()
"""


def _driver(tmp_path: Path, home: Path, mode: str) -> subprocess.Popen[str]:
    script = tmp_path / "stream.py"
    script.write_text(SLOW_STREAM)
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(script), mode], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def test_a_worker_killed_mid_stream_leaves_the_answer_whole_and_no_block_behind(tmp_path: Path,
                                                                                  home: Path) -> None:
    driver = _driver(tmp_path, home, "worker")
    try:
        out, _ = driver.communicate(timeout=240)
    finally:
        driver.kill()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert driver.returncode == 0, out
    total, shared = (int(v) for v in lines["TOTAL"].split())
    assert total == sum(range(2_400_000)) and shared > 0
    assert lines["LEFT"] == "[]"
    assert not os.path.exists(lines["INBOX"])  # removed when the driver exits


def test_a_driver_killed_mid_stream_has_its_inbox_swept(tmp_path: Path, home: Path) -> None:
    driver = _driver(tmp_path, home, "driver")
    try:
        assert driver.stdout is not None
        inbox_line = driver.stdout.readline().split()
        assert inbox_line[0] == "INBOX", inbox_line
        assert driver.stdout.readline().strip() == "STREAMING"
        folder = inbox_line[1]
        assert os.path.isdir(folder)
        assert folder not in handoff.sweep()  # its owner lives (whatever pid namespace it is in)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        driver.kill()
    # its workers die with it (tests/runtime/test_orphans.py); what they wrote stays until a sweep
    eventually(lambda: folder in handoff.sweep() or not os.path.exists(folder), timeout=30,
               message=f"the killed driver's inbox {folder} swept")
    assert not os.path.exists(folder)
    assert os.path.isdir(handoff.inbox().path)  # a live consumer's inbox is never swept


def test_a_worker_that_iterated_a_dataset_removes_its_inbox_when_it_ends(tmp_path: Path) -> None:
    """A task on a worker iterates a Dataset (the worker makes an inbox); once the cluster shuts down, the
    worker's inbox is gone at once, not left for the next sweep (workers end by os._exit: no exit handlers)."""
    code = """
    import os, sys
    import numpy as np
    import airflowless
    from airflowless import data
    from airflowless.data.execution import handoff

    def iterate():
        wide = data.range(200_000, parallelism=4).map_batches(lambda b: {"x": np.ones((len(b["id"]), 8))})
        rows = sum(len(b["x"]) for b in wide.iter_batches(batch_size=50_000))
        return rows, handoff.inbox().path

    client = airflowless.init(n_workers=2, quiet=True, dashboard_address=None)
    rows, folder = client.submit(iterate).result()
    made = os.path.isdir(folder)
    airflowless.shutdown()
    print(rows, made, os.path.exists(folder), folder)
    """
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows, made, left, folder = done.stdout.split()[-4:]
    assert (rows, made, left) == ("200000", "True", "False"), folder
