"""Blocks handed to a process on the same host through shared memory instead of Dask's sockets.

A consumer (the driver iterating a Dataset, a rank reading its shard) owns an
*inbox*: a folder under ``/dev/shm`` that only its user can open (0700). The
task that makes a block the consumer will read ends with :class:`WriteShared`
(a read or a map: :func:`fused`); any other block gets a :func:`write_block`
task of its own (:meth:`Inbox.hand_off`), which Dask runs first on the worker
that holds it. Either writes the block into the inbox as an Arrow IPC stream
and returns a small :class:`SharedBlock`. The consumer memory-maps the file,
reads it without a copy and unlinks it at once (:meth:`Inbox.open`): the
mapping keeps the pages for as long as the table's buffers live, and the
folder is empty again. A block through Dask's socket is pickled, sent,
received and unpickled: two copies and two passes over the bytes more.

A worker that cannot see the inbox (another host, another container, another
user), holds a block under ``DataContext.shared_memory_min_bytes``, or finds
``/dev/shm`` short of room (a quarter of it, and at least 256 MB, stays free
for others: NCCL and torch's DataLoader use it too) returns the block itself,
which travels as before; nothing needs to know where workers run.

Lifetimes, and what happens after a crash. Liveness is told by ``flock``
locks, not pids (pids repeat, and containers sharing ``/dev/shm`` see other
pids):

- consumed: the file is unlinked as soon as it is mapped;
- abandoned (a consumer stops early): :meth:`Inbox.let_go` unlinks the files
  already written and leaves a ``.gone`` mark for a block still being made,
  which its writer sees after its rename and unlinks its own file; marks go
  after :data:`MARK_AGE_S` (:meth:`Inbox.tidy`);
- a writer killed mid-write leaves ``<name>.tmp-<id>`` that nobody holds
  locked any more: :meth:`Inbox.tidy` (run when each stream ends) removes it;
- the consumer killed: its inbox's ``.token`` is no longer locked, and the
  next :func:`inbox` made on the host (or :func:`sweep`) removes the folder;
  the consumer's own exit removes it otherwise.

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
import fcntl
import hashlib
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..transforms import BlockTransform

__all__ = ["Fetch", "Inbox", "SharedBlock", "WriteShared", "fetch", "fused", "inbox", "request", "sweep", "wanted",
           "write_block"]

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

    def hand_off(self, client: Any, block: Any, min_bytes: int) -> Any:
        """A :func:`write_block` task on ``block`` (a future), run ahead of other ready tasks where it is."""
        return client.submit(write_block, block, self.path, self.token, min_bytes,
                             key=f"hand-off-{uuid.uuid4().hex}", pure=False, priority=1)

    def open(self, result: Any) -> pa.Table:
        """The table of a :func:`write_block` result: mapped and unlinked, or the table that travelled."""
        if not isinstance(result, SharedBlock):
            return result
        if os.path.dirname(result.path) != self.path:
            raise ValueError(f"{result.path} is not in this process's inbox {self.path}")
        try:
            with pa.memory_map(result.path) as source:
                return pa.ipc.open_stream(source).read_all()  # its buffers keep the mapping after close
        finally:
            with contextlib.suppress(OSError):
                os.unlink(result.path)

    def let_go(self, futures: list[Any]) -> None:
        """The blocks of these hand-off ``futures`` will not be read: remove the files written, and mark the
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
                    if ".tmp-" in entry and not _held(path) or \
                            entry.endswith(".gone") and now - os.stat(path).st_mtime > MARK_AGE_S:
                        os.unlink(path)

    def remove(self) -> None:
        """Remove the inbox and what is in it (at this process's exit; never from a forked child)."""
        if os.getpid() == self.pid:
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.close(self._lock)


_inbox: Inbox | None = None
_lock = threading.Lock()


def _forget() -> None:
    """In a forked child: the parent's inbox and lock are not this process's."""
    global _inbox, _lock
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


def sweep(base: str | None = None) -> list[str]:
    """Remove the inboxes whose owner is gone (killed, or exited without cleaning), and inboxes left half
    made a minute ago or more; their paths.

    >>> sweep() == [] or None                 # a fresh host, or one whose consumers all ended well
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


def _room(folder: str, nbytes: int) -> bool:
    """Whether ``nbytes`` more leave /dev/shm a quarter free, and at least :data:`HEADROOM_BYTES`."""
    found = os.statvfs(folder)
    free, size = found.f_bavail * found.f_frsize, found.f_blocks * found.f_frsize
    return free - nbytes >= max(size // 4, HEADROOM_BYTES)


def write_block(table: pa.Table, folder: str, token: str, min_bytes: int, key: str = "") -> Any:
    """Run on the worker holding ``table``: write it into the inbox ``folder`` and return a
    :class:`SharedBlock`; or return the table itself when it is under ``min_bytes``, the inbox is not
    visible here, or /dev/shm is short of room. The file is named after ``key``, by default the running
    task's."""
    if table.nbytes < min_bytes:
        return table
    try:
        with open(os.path.join(folder, _TOKEN)) as mark:
            if mark.read() != token or not _room(folder, table.nbytes):
                return table
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


@dataclass
class Fetch:
    """Blocks asked for with :func:`request`: collect them with :meth:`tables`, or :meth:`drop` them."""

    client: Any
    futures: list[Any]  # the blocks' hand-offs into ``box``; the blocks themselves where ``box`` is None
    box: Inbox | None = None

    def tables(self) -> list[pa.Table]:
        try:
            results = self.client.gather(self.futures)
            return [self.box.open(r) for r in results] if self.box is not None else results
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        """Let the blocks go unread: their files are removed, their hand-offs cancelled (never the blocks:
        they are the dataset's)."""
        if self.box is not None:
            self.box.let_go(self.futures)
            self.client.cancel(self.futures)
            self.box.tidy()


def request(client: Any, futures: list[Any], min_bytes: int | None) -> Fetch:
    """Start fetching the blocks of ``futures`` from the workers holding them: through this process's inbox
    where they share its host and are ``min_bytes`` or more (their hand-offs start now, so a consumer can
    ask for the next blocks before it reads these), else through Dask (``min_bytes`` None: all of them).
    For a rank reading its shard or an epoch's parts; ``min_bytes`` is the driver's :func:`wanted`."""
    box = inbox() if min_bytes is not None else None
    if box is None or min_bytes is None:
        return Fetch(client, futures)
    return Fetch(client, [box.hand_off(client, future, min_bytes) for future in futures], box)


def fetch(client: Any, futures: list[Any], min_bytes: int | None) -> list[pa.Table]:
    """The blocks of ``futures``, now (:func:`request`)."""
    return request(client, futures, min_bytes).tables()


@dataclass(frozen=True, eq=False)
class WriteShared(BlockTransform):
    """The last step of the tasks whose blocks a consumer reads: :func:`write_block` into its inbox."""

    folder: str
    token: str
    min_bytes: int
    name: str = "HandOff"

    def __call__(self, table: pa.Table) -> Any:
        return write_block(table, self.folder, self.token, self.min_bytes)


def fused(op: Any, box: Inbox, min_bytes: int) -> Any:
    """``op`` with its tasks writing their blocks into ``box``, when it is a read or a map on no actor
    pool (the task that makes a block writes it); None otherwise."""
    from ..physical.operators import MapOp, ReadOp

    if not isinstance(op, ReadOp | MapOp) or getattr(op, "pool", None) is not None:
        return None
    return dataclasses.replace(op, transforms=(*op.transforms, WriteShared(box.path, box.token, min_bytes)))
