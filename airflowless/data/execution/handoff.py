"""Blocks handed to a process on the same host through shared memory instead of Dask's sockets.

A consumer (the driver iterating a Dataset) owns an *inbox*: a folder under
``/dev/shm`` that only its user can open (0700). When the plan's top operator
is a read or a map, its tasks end with :class:`WriteShared` (:func:`fused`):
the task that makes a block writes it into the inbox as an Arrow IPC stream
and returns a small :class:`SharedBlock`. The consumer memory-maps the file,
reads it without a copy and unlinks it at once (:meth:`Inbox.open`): the
mapping keeps the pages for as long as the table's buffers live, and the
folder is empty again. A block through Dask's socket is pickled, sent,
received and unpickled: two copies and two passes over the bytes more.

The task returns the block itself, which travels as before, when it is under
``DataContext.shared_memory_min_bytes``; when the inbox is not visible or not
the consumer's (another host, a container with its own ``/dev/shm``, a worker
running as another user, root included); when the worker runs in the
consumer's own process (nothing to copy); when the block holds an extension
type IPC would not give back; or when ``/dev/shm`` is short of room (a
quarter of it, and at least 256 MB, stays free for others: NCCL and torch's
DataLoader use it too, so Docker's default 64 MB is never used).

Lifetimes, and what happens after a crash. Liveness is told by ``flock``
locks, not pids (pids repeat, and containers sharing ``/dev/shm`` see other
pids):

- consumed: the file is unlinked as soon as it is mapped;
- abandoned (a consumer stops early): :meth:`Inbox.let_go` unlinks the files
  already written and leaves a ``.gone`` mark for a block still being made,
  which its writer sees after its rename and unlinks its own file; marks go
  after :data:`MARK_AGE_S` (:meth:`Inbox.tidy`), and a writer still running
  then leaves its file until the consumer exits;
- a task run again on another host after its worker died returns the table,
  and the consumer removes what the first run wrote;
- a writer killed mid-write leaves ``<name>.tmp-<id>`` that nobody holds
  locked any more: :meth:`Inbox.tidy` (run when each stream ends) removes it;
- the consumer killed: its inbox's ``.token`` is no longer locked, and the
  next inbox made on the host (:func:`inbox`, by any process that iterates a
  Dataset) removes the folder; the consumer's own exit removes it otherwise.

>>> import pyarrow as pa
>>> box = inbox()
>>> block = pa.table({"x": list(range(100_000))})
>>> shared = write_block(block, box.path, box.token, 0, "a task's key")
>>> isinstance(shared, SharedBlock)  # this process is the consumer: only a worker elsewhere writes
False
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import hashlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ...errors import AirflowlessError
from ..transforms import BlockTransform

__all__ = ["Inbox", "SharedBlock", "WriteShared", "close_inbox", "fused", "inbox", "sweep", "wanted", "write_block"]

ROOT = "/dev/shm"
MARK_AGE_S = 3600.0  # a writer still running this long after its consumer stopped leaves its file to the exit
HEADROOM_BYTES = 256 << 20  # /dev/shm kept free for others (and a quarter of it)
_TOKEN = ".token"
_NEW = ".new-"  # an inbox being made: renamed into place once its token is locked


@dataclass(frozen=True)
class SharedBlock:
    """Where a worker wrote a block for an inbox, and what it holds."""

    path: str
    rows: int
    nbytes: int


def file_name(key: str) -> str:
    """The file a task's block is written to: a digest of its key (keys hold ``/`` and run long)."""
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def _held(path: str) -> bool:
    """Whether a live process holds ``path``'s lock (an inbox's token, a writer's scratch file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _base() -> str | None:
    """``/dev/shm/airflowless-<uid>``, private to this user; None where it cannot be (no /dev/shm, Windows,
    a folder of that name that is somebody else's or open to others)."""
    if os.name != "posix" or not os.path.isdir(ROOT):
        return None
    base = os.path.join(ROOT, f"airflowless-{os.getuid()}")
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        found = os.lstat(base)
    except OSError:
        return None
    if os.path.islink(base) or not os.path.isdir(base) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        return None
    return base


class Inbox:
    """This process's folder for blocks handed over through shared memory (see the module)."""

    def __init__(self, base: str) -> None:
        self.pid = os.getpid()
        self.token = uuid.uuid4().hex
        self.path = os.path.join(base, f"{self.pid}-{self.token[:12]}")
        making = os.path.join(base, _NEW + self.token)
        os.mkdir(making, 0o700)
        try:
            self._lock = os.open(os.path.join(making, _TOKEN), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_SH)  # held while this process lives: how a sweep tells
            os.write(self._lock, self.token.encode())
            os.rename(making, self.path)
        except OSError:
            shutil.rmtree(making, ignore_errors=True)
            raise
        atexit.register(self.remove)

    def open(self, result: Any, key: str) -> pa.Table:
        """The table of task ``key``'s :func:`write_block` result: mapped and unlinked, or the table that
        travelled (then a file an earlier run of the task wrote, before its worker died, is removed)."""
        if not isinstance(result, SharedBlock):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.path, file_name(key) + ".arrow"))
            return result
        if os.path.dirname(result.path) != self.path:  # airflowless's own mistake: never unlink elsewhere
            raise AirflowlessError(f"{result.path} is not in this process's inbox {self.path}")
        try:
            with pa.memory_map(result.path) as source:
                return pa.ipc.open_stream(source).read_all()  # its buffers keep the mapping after close
        finally:
            with contextlib.suppress(OSError):
                os.unlink(result.path)

    def let_go(self, futures: Iterable[Any]) -> None:
        """The blocks of these tasks' ``futures`` will not be read: remove the files written, and mark the
        blocks still being made, whose writers then unlink their files themselves. Call before cancelling
        them (a cancelled future counts as done)."""
        for future in futures:
            name = os.path.join(self.path, file_name(str(future.key)))
            with contextlib.suppress(OSError):
                if future.status != "finished":
                    open(name + ".gone", "w").close()
            with contextlib.suppress(OSError):
                os.unlink(name + ".arrow")

    def tidy(self) -> None:
        """Remove what writers killed mid-write left (scratch files nobody holds locked), and marks older
        than :data:`MARK_AGE_S`."""
        now = time.time()
        with contextlib.suppress(OSError):
            for entry in os.listdir(self.path):
                path = os.path.join(self.path, entry)
                with contextlib.suppress(OSError):
                    age = now - os.stat(path).st_mtime
                    if ".tmp-" in entry and age > 10 and not _held(path) or entry.endswith(".gone") and age > MARK_AGE_S:
                        os.unlink(path)  # (a scratch file gets its lock just after it is made: young ones stay)

    def remove(self) -> None:
        """Remove the inbox and what is in it (at this process's exit; never from a forked child)."""
        if os.getpid() == self.pid:
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.close(self._lock)


_inbox: Inbox | None = None
_lock = threading.Lock()


def _forget() -> None:
    """In a forked child: the parent's inbox and lock are not this process's (nor its token's lock, which
    would keep a dead parent's inbox looking alive)."""
    global _inbox, _lock
    if _inbox is not None:
        with contextlib.suppress(OSError):
            os.close(_inbox._lock)
    _inbox, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


def wanted() -> int | None:
    """The smallest block this process's consumers take through shared memory; None when they take none
    (``DataContext.shared_memory_blocks`` and ``shared_memory_min_bytes``).

    >>> wanted()
    1048576
    """
    from ..context import DataContext

    ctx = DataContext.get_current()
    return ctx.shared_memory_min_bytes if ctx.shared_memory_blocks else None


def inbox() -> Inbox | None:
    """This process's inbox (made on first use, after a :func:`sweep`), or None where there can be none
    (no ``/dev/shm``, or it is full)."""
    global _inbox
    with _lock:
        if _inbox is None or _inbox.pid != os.getpid():
            base = _base()
            if base is None:
                return None
            sweep(base)
            try:
                _inbox = Inbox(base)
            except OSError:
                return None
        return _inbox


def close_inbox() -> None:
    """Remove this process's inbox now, if it made one: for a process that ends by ``os._exit`` (an embedded
    worker), where the exit handler that would remove it does not run."""
    made = _inbox
    if made is not None:
        made.remove()


def sweep(base: str | None = None) -> list[str]:
    """Remove the inboxes whose owner is gone (killed, or exited without cleaning), and inboxes left half
    made a minute ago or more; their paths.

    >>> all(path.startswith(ROOT) for path in sweep())
    True
    """
    base = base or _base()
    removed: list[str] = []
    if base is None:
        return removed
    with contextlib.suppress(OSError):
        for entry in os.listdir(base):
            path = os.path.join(base, entry)
            with contextlib.suppress(OSError):
                if entry.startswith(_NEW) and time.time() - os.stat(path).st_mtime < 60:
                    continue  # being made right now
                if entry.startswith(_NEW) or not _held(os.path.join(path, _TOKEN)):
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(path)
    return removed


def _task_key() -> str:
    """The key of the task running this (the name :meth:`Inbox.let_go` knows its file by)."""
    from distributed import get_worker

    try:
        return str(get_worker().get_current_task())
    except ValueError:  # not in a task: nobody will let it go by name
        return uuid.uuid4().hex


def _extension(schema: pa.Schema) -> bool:
    """Whether a column holds an extension type anywhere (a Python one comes back from IPC as its storage
    type unless the consumer registered it too; pickling keeps it)."""
    def has(kind: pa.DataType) -> bool:
        return isinstance(kind, pa.BaseExtensionType) or any(has(kind.field(i).type) for i in range(kind.num_fields))

    return any(has(field.type) for field in schema)


def _room(folder: str, nbytes: int) -> bool:
    """Whether ``nbytes`` more leave /dev/shm a quarter free, and at least :data:`HEADROOM_BYTES`."""
    found = os.statvfs(folder)
    free, size = found.f_bavail * found.f_frsize, found.f_blocks * found.f_frsize
    return free - nbytes >= max(size // 4, HEADROOM_BYTES)


def write_block(table: pa.Table, folder: str, token: str, min_bytes: int, key: str = "") -> Any:
    """Run by the task that made ``table``: write it into the inbox ``folder`` and return a
    :class:`SharedBlock`; or return the table itself (see the module for when). The file is named after
    ``key``, by default the running task's."""
    if table.nbytes < min_bytes or _inbox is not None and _inbox.path == folder or _extension(table.schema):
        return table  # small, or the consumer is this process, or IPC would not give its types back
    try:
        with open(os.path.join(folder, _TOKEN)) as mark:
            if mark.read() != token or os.stat(folder).st_uid != os.geteuid() or not _room(folder, table.nbytes):
                return table  # the consumer's own user writes there (root's files it could not read)
    except OSError:
        return table  # another host, container or user
    name = os.path.join(folder, file_name(key or _task_key()))
    scratch = f"{name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        held = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return table
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # while it is written: tidy() leaves it alone
        with pa.OSFile(scratch, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)  # a stream takes a new dictionary per batch; a file would refuse it
        os.rename(scratch, name + ".arrow")
    except (OSError, pa.ArrowException):  # /dev/shm full, the inbox gone, a type IPC cannot hold
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        return table
    finally:
        os.close(held)
    if os.path.exists(name + ".gone"):  # the consumer stopped waiting for it
        with contextlib.suppress(OSError):
            os.unlink(name + ".arrow")
        return table
    return SharedBlock(name + ".arrow", table.num_rows, table.nbytes)


@dataclass(frozen=True, eq=False)
class WriteShared(BlockTransform):
    """The last step of the tasks whose blocks a consumer reads: :func:`write_block` into its inbox."""

    folder: str
    token: str
    min_bytes: int
    name: str = "HandOff"

    def __call__(self, table: pa.Table) -> Any:
        return write_block(table, self.folder, self.token, self.min_bytes)


def fused(op: Any) -> tuple[Any, Inbox | None]:
    """``op`` with its tasks writing their blocks into this process's inbox, and the inbox, when ``op`` is a
    read or a map on no actor pool (the task that makes a block writes it) and shared memory is on and
    there; else ``op`` as it is and None (its blocks come through Dask)."""
    from ..physical.operators import MapOp, ReadOp

    min_bytes = wanted()
    if min_bytes is None or not isinstance(op, ReadOp | MapOp) or getattr(op, "pool", None) is not None:
        return op, None
    box = inbox()
    if box is None:
        return op, None
    return dataclasses.replace(op, transforms=(*op.transforms, WriteShared(box.path, box.token, min_bytes))), box
