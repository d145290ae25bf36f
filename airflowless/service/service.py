"""The service: a long-running process that queues due runs and starts a driver for each.

Each tick (:data:`TICK_S`) it

1. queues the runs of the deployments that are due (:meth:`Store.schedule_due`), and of those that follow
   runs of others that just ended (:meth:`Store.queue_followers`); the deployments with a file trigger
   each have a watcher thread (:mod:`.watch`) that queues a run per new match and wakes the loop;
2. queues again the runs claimed by services that died before their driver
   started (:meth:`Store.release_orphans`, every heartbeat), and settles the
   runs whose driver died, queueing a resume of those whose deployment asks
   for it (:meth:`Store.resume_abandoned_runs`, ``deploy --resume-abandoned N``);
3. claims the queued runs that may start now (:meth:`Store.claim_runs`: limits,
   pools, priorities) and starts each one's driver as a child process
   (:mod:`.driver`), in a session of its own: a driver outlives a service that
   is stopped or killed, and a service started again does not start it twice.
   One driver is kept *warm* (``warm_drivers``): started and imported before
   there is a run, it takes the next claimed run at once (then another is
   started); it ends by itself when its service goes away;
4. reaps the drivers that ended; one that ended before it took its run fails
   the run with the end of its log; stops a driver past the service's limits
   (``driver_memory_mb`` resident, ``driver_timeout_s``): SIGTERM, which cancels
   its stages as Ctrl-C would, SIGKILL to its process group if it is still there
   after :data:`STOP_GRACE_S`; the run is then recorded ``failed`` with the limit
   it passed;
5. sends the notifications of runs that ended (:mod:`.notify`), in threads of their own.

The record is the only state: any number of services may share a PostgreSQL
record; on a SQLite record a second service is refused (a lock file beside the
database), since SQLite is one machine's file. A driver's output is the run's
log, in ``$AIRFLOWLESS_HOME/service/logs/run-<id>.log`` (private to the user), copied to
the run's storage for other machines (:mod:`.driver_logs`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import ConfigError
from ..settings import get_settings
from ..store.liveness import Driver, this_driver
from ..store.records import RunStatus
from .driver_logs import Copier, DriverLog, log_dir, log_path, storage_uri

if TYPE_CHECKING:
    from ..store import Store
    from ..store.records import RunRecord

__all__ = ["Service", "TICK_S", "log_path"]

log = logging.getLogger(__name__)

TICK_S = 0.25
"""How often the service looks for due and startable runs (schedule lag is at most this, plus a driver's start)."""

WARM_RETRY_S = 30.0
"""How long after a warm driver ended without a run (it could not start) the service tries another."""

STOP_GRACE_S = 10.0
"""How long a driver stopped for a limit gets to cancel its stages before it is killed."""

WATCH_REFRESH_S = 1.0
"""How often the service looks for file-triggered deployments created, changed, paused or removed."""


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class _Child:
    run_id: int
    process: subprocess.Popen[bytes] | _Adopted
    log: IO[bytes]
    copy: DriverLog  # the log's copy in the run's storage
    warm: bool = False  # a warm driver was handed the run
    began: float = field(default_factory=time.monotonic)
    over: str | None = None  # the limit it passed: it is being stopped
    stopped_at: float = 0.0  # when it was asked to stop (monotonic)


@dataclass
class Service:
    """Queues due runs and drives them; ``run()`` until stopped. Build with a store and its URL."""

    store: Store
    db_url: str
    address: str | None = None  # the cluster the drivers join (None: each starts an embedded one)
    clock: Callable[[], datetime] = _utcnow
    tick_s: float = TICK_S
    driver_memory_mb: float | None = None  # a driver's resident memory past this: its run is stopped
    driver_timeout_s: float | None = None  # a driver running longer than this: its run is stopped
    warm_drivers: bool = True  # keep one driver started and imported, waiting for the next run
    _spare: subprocess.Popen[bytes] | None = None
    _spare_failed_at: float = -WARM_RETRY_S
    id: int | None = None
    children: dict[int, _Child] = field(default_factory=dict)
    _lock_file: IO[str] | None = None
    _beat: float = 0.0
    _heartbeat_s: float = 5.0
    _notifier: Any = None
    _watches: dict[int, Any] = field(default_factory=dict)
    _watched_at: float = 0.0
    _wake: threading.Event = field(default_factory=threading.Event)
    _copier: Copier = field(default_factory=Copier)  # writes the driver logs' copies, off the tick

    def start(self) -> int:
        """Register this service in the record (SQLite: refused if another serves it); its id."""
        self._lock_file = _single_service_lock(self.store)
        self.id = self.store.register_service(this_driver(), self.address)
        self._adopt()
        self._beat = time.monotonic()
        self._heartbeat_s = get_settings().heartbeat_s
        from .notify import Notifier

        self._notifier = Notifier(self.store)
        log.info("service %d on %s (record %s, cluster %s)", self.id, os.getpid(), self.store.url,
                 self.address or "embedded per run")
        return self.id

    def tick(self) -> list[int]:
        """One pass: queue what is due, start what may start, reap what ended; the runs started."""
        assert self.id is not None, "start() the service first"
        now = self.clock()
        queued = self.store.schedule_due(now) + self.store.queue_followers()
        if queued:
            log.info("queued run(s) %s", queued)
        if time.monotonic() - self._beat >= self._heartbeat_s:
            self.store.service_heartbeat(self.id)
            released = self.store.release_orphans()
            if released:
                log.warning("queued again run(s) %s: the service that claimed them died", released)
            self._adopt()
            for dead, resume in self.store.resume_abandoned_runs():
                log.warning("run %d: its driver died; %s", dead, f"queued run {resume} to resume it" if resume
                            else "not resumed (its deployment's resume_abandoned is spent)")
            self._beat = time.monotonic()
        if time.monotonic() - self._watched_at >= WATCH_REFRESH_S:
            self._refresh_watches()
        started = [self._spawn(run) for run in self.store.claim_runs(self.id, now=now)]
        self._reap()
        for child in self.children.values():
            self._copier.sync(child.copy)  # at most every few seconds each, and only what grew
        self._enforce_limits()
        self._keep_warm()
        self._notifier.tick()
        return started

    def run(self, stop: threading.Event | None = None) -> None:
        """Tick until ``stop`` is set (or SIGTERM/SIGINT in the main thread); drivers keep running after."""
        stop = stop or threading.Event()
        if self.id is None:
            self.start()
        with _stop_on_signals(stop):
            try:
                while not stop.is_set():
                    began = time.monotonic()
                    self._wake.clear()
                    try:
                        self.tick()
                    except Exception:  # the record went away for a moment: the next tick tries again
                        log.exception("service tick failed; trying again")
                        stop.wait(1.0)
                    self._wake.wait(max(0.0, self.tick_s - (time.monotonic() - began)))  # a watcher queued a run
            finally:
                self.close()

    def close(self) -> None:
        """Say this service stopped; its drivers run on, and a later service finds their runs in the record."""
        self._copier.close()  # first: a successor that adopts a driver appends to a copy this one finished
        if self.id is not None:
            with contextlib.suppress(Exception):
                self.store.service_heartbeat(self.id, stopped=True)
        for child in self.children.values():
            child.log.close()
        if self._spare is not None and self._spare.stdin is not None:
            self._spare.stdin.close()  # its end of input: it ends
            self._spare = None
        for watch in self._watches.values():
            watch.stop()
        self._watches.clear()
        if self._notifier is not None:
            self._notifier.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def _refresh_watches(self) -> None:
        """A watcher for each file-triggered deployment that is active; a changed one's watcher started again."""
        from .watch import FileWatch

        self._watched_at = time.monotonic()
        wanted = {row["id"]: row for row in self.store.file_deployments()}
        for deployment_id, watch in list(self._watches.items()):
            row = wanted.get(deployment_id)
            if row is None or row["updated_at"] != watch.version:
                watch.stop()
                del self._watches[deployment_id]
        for deployment_id, row in wanted.items():
            if deployment_id not in self._watches:
                self._watches[deployment_id] = FileWatch(self.store, row, self._wake.set).start()

    def _driver_env(self) -> dict[str, str]:
        env = {**os.environ, "AIRFLOWLESS_DB": self.db_url}
        env.pop("AIRFLOWLESS_ADDRESS", None)
        if self.address:
            env["AIRFLOWLESS_ADDRESS"] = self.address
        return env

    def _keep_warm(self) -> None:
        """Start a warm driver if none waits (its output, until it has a run, goes to ``spare.log``)."""
        if not self.warm_drivers or (self._spare is not None and self._spare.poll() is None):
            return
        if self._spare is not None:
            log.warning("the warm driver (pid %d) ended with code %s before it had a run (see %s); runs start "
                        "cold for %g s", self._spare.pid, self._spare.returncode, log_dir() / "spare.log",
                        WARM_RETRY_S)
            self._spare, self._spare_failed_at = None, time.monotonic()
        if time.monotonic() - self._spare_failed_at < WARM_RETRY_S:
            return
        try:
            with open(log_dir() / "spare.log", "ab") as output:
                os.chmod(output.name, 0o600)
                self._spare = subprocess.Popen([sys.executable, "-m", "airflowless.service.driver", "--wait"],
                                               stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,
                                               env=self._driver_env(), start_new_session=True)
        except OSError as exc:  # no room for a process or a file now: runs start cold meanwhile
            log.warning("could not start a warm driver (%s); runs start cold for %g s", exc, WARM_RETRY_S)
            self._spare_failed_at = time.monotonic()

    def _hand_to_spare(self, run_id: int, log_file: str) -> subprocess.Popen[bytes] | None:
        """Give run ``run_id`` to the warm driver, if one waits; it, or None."""
        spare, self._spare = self._spare, None
        if spare is None or spare.poll() is not None or spare.stdin is None:
            return None
        try:
            spare.stdin.write(f"{run_id} {log_file}\n".encode())
            spare.stdin.close()
        except OSError:  # it ended meanwhile
            return None
        return spare

    def _spawn(self, run: RunRecord) -> int:
        log_dir()
        path = log_path(run.id)
        output = open(path, "ab")  # noqa: SIM115 (kept open while the driver runs)
        os.chmod(output.name, 0o600)
        spare = self._hand_to_spare(run.id, output.name)
        process = spare or subprocess.Popen(
            [sys.executable, "-m", "airflowless.service.driver", str(run.id)], stdout=output,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._driver_env(), start_new_session=True)
        copy = DriverLog(path, storage_uri(get_settings().storage, run.id))
        self.children[run.id] = _Child(run.id, process, output, copy, warm=spare is not None)
        self.store.set_run_driver(run.id, _driver_of(process.pid), log_uri=copy.uri)
        log.info("run %d (%s, %s) started: driver pid %d", run.id, run.pipeline, run.trigger, process.pid)
        return run.id

    def _adopt(self) -> None:
        """Watch the drivers on this host that a service now gone started (killed, or stopped while they ran):
        their limits hold, their logs are copied, as for this service's own."""
        import socket

        assert self.id is not None
        for run in self.store.adopt_drivers(self.id, socket.gethostname()):
            run_id, path = run["id"], log_path(run["id"])
            if run_id in self.children:
                continue
            log_dir()
            output = open(path, "ab")  # noqa: SIM115 (the driver writes it; kept as a child's is)
            process = _Adopted(run["driver_pid"])
            # its age as the first service counted it: from when it was handed the run (a warm driver may have
            # waited long before that)
            age = max(0.0, time.time() - run["claimed_at"].timestamp()) if run["claimed_at"] else 0.0
            self.children[run_id] = _Child(run_id, process, output, DriverLog(path, run["driver_log_uri"]),
                                           began=time.monotonic() - age)
            log.info("run %d: adopted its driver (pid %d), started by a service that is gone", run_id, process.pid)

    def _reap(self) -> None:
        """Record what the drivers that ended leave unrecorded (a child is forgotten once that is written)."""
        for run_id, child in list(self.children.items()):
            code = child.process.poll()
            if code is None:
                continue
            if child.over is not None:
                self._record_stopped(child)
            elif child.warm and self.store.get_run(run_id).status == RunStatus.QUEUED:
                # a warm driver that died before it took its run (it was still starting): the run starts cold
                log.warning("run %d: its warm driver (pid %d) ended with code %s before taking it (see %s); "
                            "starting it cold, and runs start cold for %g s", run_id, child.process.pid, code,
                            log_dir() / "spare.log", WARM_RETRY_S)
                self._spare_failed_at = time.monotonic()
                del self.children[run_id]
                child.log.close()
                self._spawn(self.store.get_run(run_id))
                continue
            else:
                tail = _tail(Path(child.log.name))
                if self.store.fail_queued_run(run_id, f"its driver exited with code {code} before it took the "
                                                      f"run:\n{tail}"):
                    log.warning("run %d failed: its driver exited with code %d before taking it", run_id, code)
            del self.children[run_id]
            child.log.close()
            self._copier.sync(child.copy, final=True)

    def _enforce_limits(self) -> None:
        """Stop the drivers past the service's limits; kill those that outlived their grace."""
        if self.driver_memory_mb is None and self.driver_timeout_s is None:
            return
        now = time.monotonic()
        for child in self.children.values():
            if child.over is not None:
                if now - child.stopped_at > STOP_GRACE_S:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(child.process.pid, signal.SIGKILL)  # its session: an embedded cluster too
                continue
            child.over = self._limit_passed(child, now)
            if child.over is not None:
                log.warning("run %d: %s; stopping its driver (pid %d)", child.run_id, child.over, child.process.pid)
                child.stopped_at = now
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(signal.SIGTERM)  # it cancels its stages, as on Ctrl-C

    def _limit_passed(self, child: _Child, now: float) -> str | None:
        """What limit ``child``'s driver passed, said for the run's error; None while within them."""
        if self.driver_memory_mb is not None:
            import psutil

            try:
                resident = psutil.Process(child.process.pid).memory_info().rss
            except psutil.Error:
                resident = 0
            if resident > self.driver_memory_mb * 2**20:
                return (f"its driver used {resident / 2**20:.0f} MiB of memory, over the service's limit of "
                        f"{self.driver_memory_mb:g} MiB (AIRFLOWLESS_DRIVER_MEMORY_MB, or "
                        "`service start --driver-memory-mb`)")
        if self.driver_timeout_s is not None and now - child.began > self.driver_timeout_s:
            return (f"its driver ran longer than {self.driver_timeout_s:g} s, the service's driver timeout "
                    "(AIRFLOWLESS_DRIVER_TIMEOUT_S, or `service start --driver-timeout`)")
        return None

    def _record_stopped(self, child: _Child) -> None:
        """Record the run of a driver stopped for a limit ``failed``, saying which: unless it ended otherwise
        first (it succeeded or failed meanwhile, or someone else cancelled it)."""
        run = self.store.get_run(child.run_id)
        error = f"stopped by the service: {child.over}"
        if run.status == RunStatus.QUEUED:
            self.store.fail_queued_run(child.run_id, error)
        elif run.status == RunStatus.RUNNING or (run.status == RunStatus.CANCELLED
                                                 and "SIGTERM" in (run.error or "")):  # our signal's cancel
            self.store.finish_run(child.run_id, RunStatus.FAILED, error=error)
        else:
            return
        log.warning("run %d failed: %s", child.run_id, child.over)


class _Adopted:
    """A driver another service started on this host, watched by its pid (not a child of this process: its
    exit code is not known; a run it left unrecorded is found abandoned by the record's liveness rules)."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.pid = pid
        self.returncode: int | None = None
        try:
            self._process: Any = psutil.Process(pid)
        except psutil.Error:
            self._process, self.returncode = None, 0

    def poll(self) -> int | None:
        import psutil

        if self.returncode is None:
            try:
                gone = not self._process.is_running() or self._process.status() == psutil.STATUS_ZOMBIE
            except psutil.Error:
                gone = True
            if gone:
                self.returncode = 0
        return self.returncode

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)


def _driver_of(pid: int) -> Driver:
    import socket

    import psutil

    try:
        started: float | None = psutil.Process(pid).create_time()
    except psutil.Error:
        started = None
    return Driver(socket.gethostname(), pid, started)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _single_service_lock(store: Store) -> IO[str] | None:
    """On a SQLite record, a lock file held while this service runs; ConfigError if another holds it."""
    import fcntl

    url = store.engine.url
    if url.get_backend_name() != "sqlite":
        return None
    if not store.shared:
        raise ConfigError("the service needs a record other processes can read: a SQLite file or PostgreSQL, "
                          "not an in-memory SQLite")
    path = Path(str(url.database) + ".service.lock")
    handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+")  # held for the service's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(f"another airflowless service ({holder}) already serves the SQLite record {url.database}; "
                          "one service per SQLite file. Several services share a PostgreSQL record "
                          "(AIRFLOWLESS_DB=postgresql://...)") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
