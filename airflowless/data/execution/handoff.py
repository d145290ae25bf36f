"""Blocks handed to a process on the same host through shared memory instead of Dask's sockets.

A consumer (the driver iterating a Dataset, a rank reading its shard) owns an
*inbox*: a folder under ``/dev/shm`` that only its user can open (0700),
named after the consumer's pid and start time. The task that makes a block it
will read ends with :class:`WriteShared` (a read or a map: :func:`fused`);
any other block gets a :func:`write_block` task of its own, which Dask runs
on the worker that holds it. Either writes the block there as an Arrow IPC
file and returns a small :class:`SharedBlock`. The consumer memory-maps the
file, reads it without a copy and unlinks it at once: the mapping keeps the
pages for as long as the table's buffers live, and the folder is empty again.
A block through Dask's socket is pickled, sent, received and unpickled: two
copies and two passes over the bytes more.

A worker that cannot see the inbox (another host, another container, another
user) or holds a block smaller than ``DataContext.shared_memory_min_bytes``
returns the block
itself, which travels as before; nothing needs to know where workers run.

Lifetimes, and what happens after a crash:

- consumed: the file is unlinked as soon as it is mapped;
- abandoned (a consumer stops early): :meth:`Inbox.abandon` unlinks the files
  already written and leaves a ``.gone`` mark for a block still being made,
  which its writer sees after its rename and removes its file itself (marks
  go after an hour, :meth:`Inbox.tidy`);
- a writer killed mid-write leaves ``<name>.tmp-<pid>``: :meth:`Inbox.tidy`
  (run when each stream ends) removes those whose writer is dead;
- the consumer killed: its whole inbox is removed by the next :func:`inbox`
  made on the host (or :func:`sweep`), which removes every inbox whose owner
  is gone, and by the consumer's own exit otherwise.

>>> import pyarrow as pa
>>> box = inbox()
>>> block = pa.table({"x": list(range(100_000))})
>>> shared = write_block(block, box.path, box.token, 0)
>>> box.open(shared).equals(block), os.listdir(box.path) == [".token"]
(True, True)
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..transforms import BlockTransform

__all__ = ["Inbox", "SharedBlock", "WriteShared", "fetch", "fused", "inbox", "sweep", "write_block"]

ROOT = "/dev/shm"
MARK_AGE_S = 3600.0
_TOKEN = ".token"


@dataclass(frozen=True)
class SharedBlock:
    """Where a worker wrote a block for an inbox, and what it holds."""

    path: str
    rows: int
    nbytes: int


def _started(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _base() -> str | None:
    """``/dev/shm/airflowless-<uid>``, made private to this user; None where it cannot be (no /dev/shm)."""
    base = os.path.join(ROOT, f"airflowless-{os.getuid()}")
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        found = os.lstat(base)
    except OSError:
        return None
    if found.st_uid != os.getuid() or found.st_mode & 0o077 or not os.path.isdir(base) or os.path.islink(base):
        return None  # somebody else's, or opened to others: not a place for our blocks
    return base


class Inbox:
    """This process's folder for blocks handed over through shared memory (see the module)."""

    def __init__(self, base: str) -> None:
        self.pid = os.getpid()
        self.token = uuid.uuid4().hex
        self.path = os.path.join(base, f"{self.pid}-{_started(self.pid)}")
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        with open(os.path.join(self.path, _TOKEN), "w") as mark:
            mark.write(self.token)
        atexit.register(self.remove)

    @staticmethod
    def min_bytes() -> int:
        """Blocks under this size come through Dask (``DataContext.shared_memory_min_bytes``)."""
        from ..context import DataContext

        return DataContext.get_current().shared_memory_min_bytes

    def open(self, result: Any) -> pa.Table:
        """The table of a :func:`write_block` result: mapped and unlinked, or the table that travelled."""
        if not isinstance(result, SharedBlock):
            return result
        with pa.memory_map(result.path) as source:
            table = pa.ipc.open_file(source).read_all()  # buffers keep the mapping alive after close
        with contextlib.suppress(FileNotFoundError):
            os.unlink(result.path)
        return table

    def abandon(self, pending: Sequence[str], written: Sequence[str] = ()) -> None:
        """The blocks named ``pending`` (still being made) and ``written`` will not be read: remove the files
        there are, and mark the pending ones, whose writers then remove their files themselves."""
        for name in pending:
            with contextlib.suppress(OSError):
                open(os.path.join(self.path, name + ".gone"), "w").close()
        for name in [*pending, *written]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, name + ".arrow"))

    def tidy(self) -> None:
        """Remove what writers that died mid-write left (``<name>.tmp-<pid>`` of a dead pid), and marks over
        :data:`MARK_AGE_S` old (a writer that still comes after that leaves its file until this process ends)."""
        now = time.time()
        with contextlib.suppress(FileNotFoundError):
            for entry in os.listdir(self.path):
                path = os.path.join(self.path, entry)
                _, _, pid = entry.rpartition(".tmp-")
                with contextlib.suppress(FileNotFoundError):
                    dead_writer = pid.isdigit() and _started(int(pid)) is None
                    if dead_writer or entry.endswith(".gone") and now - os.stat(path).st_mtime > MARK_AGE_S:
                        os.unlink(path)

    def remove(self) -> None:
        if os.getpid() == self.pid:
            shutil.rmtree(self.path, ignore_errors=True)


_inbox: Inbox | None = None
_lock = threading.Lock()


def inbox() -> Inbox | None:
    """This process's inbox (made on first use, after a :func:`sweep`), or None where shared memory is
    unavailable or turned off (``DataContext.shared_memory_blocks``)."""
    global _inbox
    from ..context import DataContext

    if not DataContext.get_current().shared_memory_blocks:
        return None
    with _lock:
        if _inbox is None or _inbox.pid != os.getpid():  # a forked child makes its own
            base = _base()
            if base is None:
                return None
            sweep(base)
            try:
                _inbox = Inbox(base)
            except OSError:
                return None
        return _inbox


def sweep(base: str | None = None) -> list[str]:
    """Remove the inboxes whose owning process is gone (killed, or exited without cleaning); their paths."""
    base = base or _base()
    removed: list[str] = []
    if base is None:
        return removed
    for entry in os.listdir(base):
        pid, _, started = entry.partition("-")
        if pid.isdigit() and _started(int(pid)) != started:
            shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
            removed.append(os.path.join(base, entry))
    return removed


def _task_name() -> str:
    """The key of the task running this (the name :meth:`Inbox.abandon` knows its file by)."""
    from distributed import get_worker

    try:
        return str(get_worker().get_current_task())
    except ValueError:  # not in a task: nobody will abandon it by name
        return uuid.uuid4().hex


def write_block(table: pa.Table, folder: str, token: str, min_bytes: int, name: str = "") -> Any:
    """Run on the worker holding ``table``: write it into the inbox ``folder`` and return a
    :class:`SharedBlock`; or return the table itself when it is under ``min_bytes`` or the inbox is not
    visible here.
    The file is named ``name``, by default the running task's key."""
    if table.nbytes < min_bytes:
        return table
    try:
        with open(os.path.join(folder, _TOKEN)) as mark:
            if mark.read() != token:
                return table
    except OSError:
        return table  # another host, container or user
    name = name or _task_name()
    path = os.path.join(folder, name + ".arrow")
    scratch = f"{path[:-len('.arrow')]}.tmp-{os.getpid()}"
    try:
        with pa.OSFile(scratch, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.rename(scratch, path)
    except OSError:  # /dev/shm full, or the inbox removed meanwhile: the block travels as before
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        return table
    if os.path.exists(os.path.join(folder, name + ".gone")):  # the consumer stopped waiting for it
        with contextlib.suppress(OSError):
            os.unlink(path)
            os.unlink(os.path.join(folder, name + ".gone"))
        return table
    return SharedBlock(path, table.num_rows, table.nbytes)


def fetch(client: Any, futures: list[Any]) -> list[pa.Table]:
    """The blocks of ``futures``, from the workers holding them: through this process's inbox where they
    share its host, else through Dask (a training rank reading its shard, an epoch's shuffled parts)."""
    box = inbox()
    if box is None:
        return client.gather(futures)
    handed = [client.submit(write_block, f, box.path, box.token, box.min_bytes(),
                            key=f"hand-off-{uuid.uuid4().hex}", pure=False) for f in futures]
    try:
        return [box.open(result) for result in client.gather(handed)]
    except BaseException:
        box.abandon([str(h.key) for h in handed if h.status != "finished"],
                    written=[str(h.key) for h in handed if h.status == "finished"])
        raise


@dataclass(frozen=True, eq=False)
class WriteShared(BlockTransform):
    """The last step of the tasks whose blocks a consumer reads: :func:`write_block` into its inbox."""

    folder: str
    token: str
    min_bytes: int
    name: str = "HandOff"

    def __call__(self, table: pa.Table) -> Any:
        return write_block(table, self.folder, self.token, self.min_bytes)


def fused(op: Any, box: Inbox) -> Any:
    """``op`` with its tasks writing their blocks into ``box``, when it is a read or a map on no actor
    pool (the task that makes a block writes it); None otherwise."""
    from ..physical.operators import MapOp, ReadOp

    if not isinstance(op, ReadOp | MapOp) or getattr(op, "pool", None) is not None:
        return None
    return dataclasses.replace(op, transforms=(*op.transforms, WriteShared(box.path, box.token, box.min_bytes())))
