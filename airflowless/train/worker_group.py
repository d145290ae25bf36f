"""A group of ranks on Dask workers: placed together, connected by a backend, watched by the driver.

Each rank is a Dask task pinned to its worker, declaring the rank's resources.
It secedes from the worker's thread pool as soon as it starts: the worker's
thread slot is free again for the data tasks that feed the ranks, while the
declared resources stay held, so other groups (other Tune trials) queue for
them. Ranks are threads of the worker process — their data is already there
and nothing is pickled twice — and one rank of one group runs per worker
process at a time, which is what the frameworks' process-wide collectives
(torch's default process group, LightGBM's network) allow.

Ranks report through Dask events (topic ``airflowless-train-<group>``); the
driver records them, asks ranks to stop through a ``distributed.Event``, and
notices a lost worker by its absence from the scheduler. When the driver
decides on each report (a Tune scheduler that stops early), rank 0 waits after
each report for the answer, ``CONTINUE`` or ``STOP``, on the group's
``distributed.Queue`` (:meth:`WorkerGroup.answer`): the run stops at the very
report that was judged.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._dask_internals import worker_addresses, worker_resources
from ..errors import RankFailedError
from ..runtime.topics import Subscription
from ..settings import get_settings
from .backends.base import Backend, preloads_done
from .checkpoint import Checkpoint
from .context import Session, StopRequested, TrainContext, session_scope
from .placement import CapacityError, check_capacity, choose_workers
from .rank_memory import freed_memory_kept
from .rank_threads import end_ranks, rank_thread
from .rendezvous import Rendezvous
from .shards import DataShard

if TYPE_CHECKING:
    from distributed import Client, Future

__all__ = ["RankSpec", "WorkerGroup", "RankFailedError", "run_rank"]

_PLACEMENT_LOCK = "airflowless-train-placement"


@dataclass
class RankSpec:
    group: str
    rank: int
    world_size: int
    code: bytes  # the loop and its config, pickled: loaded once the worker's preloads ended (load_code)
    backend: Backend
    shards: dict[str, tuple[list[Any], int]]
    checkpoint: Checkpoint | None
    storage_dir: str
    use_gpu: bool = False
    experiment_name: str = ""
    trial_name: str = ""
    start_iteration: int = 0
    decisions: str | None = None  # rank 0 waits for the driver's answer to each report on this queue


def pickle_code(loop: Callable[..., Any], config: dict[str, Any] | None) -> bytes:
    """A rank's loop and config as :class:`RankSpec` carries them."""
    import cloudpickle

    return cloudpickle.dumps((loop, config))


def load_code(spec: RankSpec) -> tuple[Callable[..., Any], dict[str, Any] | None]:
    """The rank's loop and config, loaded after the worker's background imports ended.

    Dask unpickles a task on the worker's event loop as it arrives; a user's loop
    whose module imports ``torch.nn`` would then import it while the backend's
    preload thread is half way through ``import torch``, and one of the two
    fails. Carried as bytes, the loop is loaded here, when no preload runs.
    """
    import pickle

    preloads_done()
    loop, config = pickle.loads(spec.code)
    return loop, config


JOIN_WAIT_S = 15.0  # how long placement waits for a worker that declares no resources yet
STOP_WAIT_S = 1.0  # a rank's stop watcher waits on the stop event this long at a time (it ends this soon after the rank)


def _watch_stop(stop: Any, done: threading.Event) -> Callable[[], bool]:
    """Whether the group's ``stop`` event is set, as a thread that waits on it saw it (until ``done``).

    The stop event lives on the scheduler: asking it from the rank's own thread
    costs a round trip, which ranks in lock-step pay on every round they ask in.
    A watcher thread waits on it instead (the scheduler answers as soon as it
    is set), and the rank reads a local flag; once true, true for good.
    """
    seen = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                if stop.wait(timeout=STOP_WAIT_S):
                    seen.set()
                    return
            except Exception:  # the cluster is going away: the rank ends on its own
                return

    threading.Thread(target=watch, name="airflowless-rank-stop", daemon=True).start()
    return seen.is_set


def _stop_check(spec: RankSpec, stop: Any, done: threading.Event) -> Callable[[], bool]:
    """What a rank asks after each report: the group's stop event, and for rank 0 the driver's answer."""
    stopped = _watch_stop(stop, done)
    if spec.decisions is None or spec.rank != 0:
        return stopped
    from distributed import Queue

    decisions = Queue(spec.decisions)
    timeout_s = get_settings().decision_timeout_s  # read once, not per report

    def should_stop() -> bool:
        waited = time.monotonic()
        while time.monotonic() - waited < timeout_s and not stopped():
            try:  # in short waits: a driver that left sets the stop event (WorkerGroup.shutdown)
                return bool(decisions.get(timeout=0.5) == "STOP")
            except TimeoutError:
                continue
        return stopped()

    return should_stop


def _emit(topic: str, message: dict[str, Any]) -> None:
    from distributed import get_worker

    get_worker().log_event(topic, message)


def run_rank(spec: RankSpec) -> Any:
    """The body of a rank's task, on its worker."""
    from distributed import Event, get_client, get_worker, secede

    secede()  # free the thread slot (data tasks need it); the declared resources stay held
    topic = f"airflowless-train-{spec.group}"
    worker = get_worker()
    _emit(topic, {"event": "started", "rank": spec.rank, "worker": worker.address})
    stop = Event(f"{spec.group}-stop", client=get_client())  # also asked from the rank's stop watcher thread
    context = TrainContext(world_rank=spec.rank, world_size=spec.world_size, local_rank=0, local_world_size=1,
                           node_rank=spec.rank, experiment_name=spec.experiment_name,
                           trial_name=spec.trial_name, trial_id=spec.trial_name, trial_dir=spec.storage_dir,
                           use_gpu=spec.use_gpu)
    shards = {name: DataShard(name, blocks, rows) for name, (blocks, rows) in spec.shards.items()}
    done = threading.Event()  # ends the rank's stop watcher
    session = Session(context, lambda m: _emit(topic, {"event": "report", **m}), spec.storage_dir,
                      spec.checkpoint, shards, _stop_check(spec, stop, done), start_iteration=spec.start_iteration,
                      rendezvous=Rendezvous(spec.group, spec.backend.timeout_s))
    try:
        with rank_thread(spec.group, spec.rank):
            return _run_in_session(spec, session, stop, topic)
    finally:
        done.set()


def _run_in_session(spec: RankSpec, session: Session, stop: Any, topic: str) -> Any:
    """Run the rank's loop in its backend's context; tell the driver how it ended."""
    seconds = session.seconds
    try:
        loop, config = load_code(spec)
        began = time.perf_counter()
        with freed_memory_kept(), spec.backend.rank_context(spec, session.rendezvous) as info:
            seconds["rendezvous"] = time.perf_counter() - began
            session.backend_info = info  # type: ignore[attr-defined]
            looped = time.perf_counter()
            with session_scope(session), _frames_freed_on_error():
                result = loop() if config is None else loop(config)
            seconds["training"] = (time.perf_counter() - looped - seconds.get("data", 0.0)
                                   - seconds.get("checkpoint", 0.0))
    except StopRequested:
        result = None
    except BaseException as exc:
        # A rank told to stop leaves the framework's collective; a peer that had already gone on
        # to the next round then fails in it (LightGBM: "Connection reset by peer"). That is the
        # stop, not a failure.
        if not (isinstance(exc, Exception) and stop.is_set()):
            failure = RankFailure(spec.rank, f"rank {spec.rank} failed: {type(exc).__name__}: {exc}\n"
                                             f"{traceback.format_exc()}")
            _emit(topic, {"event": "failed", "rank": spec.rank, "error": failure.error})
            if not isinstance(exc, Exception):
                raise
            # returned, not raised: the driver tells it once (the worker would log the whole task again)
            return failure
        result = None
    _emit(topic, {"event": "finished", "rank": spec.rank, "seconds": dict(seconds)})
    return result


@dataclass
class RankFailure:
    """What a rank whose loop raised returns: its error, told by the driver as the fit's failure."""

    rank: int
    error: str
    at: float = field(default_factory=time.time)


@contextlib.contextmanager
def _frames_freed_on_error() -> Iterator[None]:
    """Free the locals of the loop's frames when it raises, before the backend's context is left.

    The traceback keeps the user's frames alive, and with them the model, which
    holds the framework's connections (a DistributedDataParallel module holds the
    process group): destroying the group would not close its sockets, and the
    other ranks would wait in their next collective until its timeout (a minute)
    instead of failing at once, as they do when a rank's process dies.
    """
    try:
        yield
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)
        gc.collect()  # a module's parameters and hooks refer to each other
        raise


@dataclass
class GroupOutcome:
    results: list[Any]
    stopped: bool = False


@dataclass
class WorkerGroup:
    """Places, starts and watches the ranks of one training attempt."""

    client: Client
    name: str
    num_workers: int
    resources: dict[str, float]
    backend: Backend
    placement_timeout_s: float | None = None
    group: str = field(default_factory=lambda: f"g{uuid.uuid4().hex[:12]}")

    def __post_init__(self) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._early: list[dict[str, Any]] = []  # events _wait_started read before watch() began
        self.futures: list[Future | None] = []  # None once a rank's result is taken (see _collect)
        self.workers: list[str] = []
        self._topic = f"airflowless-train-{self.group}"
        self._reports: Subscription | None = None  # the ranks' reports on _topic, while started
        self.decisions = f"{self.group}-decisions"  # the queue rank 0 reads answers on (RankSpec.decisions)
        self.rank_seconds: dict[int, dict[str, float]] = {}  # rank -> where its time went (when it finished)

    # -- placement -----------------------------------------------------------------
    def _offers(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        found = worker_resources(self.client, is_rank_key)
        totals = {addr: total for addr, (total, _, _) in found.items()}
        # One rank per worker process: a worker already hosting a rank (of any group) offers nothing,
        # since the frameworks' collectives are process-wide.
        free = {addr: ({} if hosting else {k: v - used.get(k, 0.0) for k, v in total.items()})
                for addr, (total, used, hosting) in found.items()}
        return totals, free

    def check_capacity(self) -> None:
        """Raise :class:`CapacityError` if the cluster is too small for the group and cannot grow."""
        from ..runtime.adaptive import may_grow

        totals, _ = self._offers()
        try:
            check_capacity(totals, self.resources, self.num_workers, what=self.name)
        except CapacityError:
            if not may_grow(self.client):  # an adaptive cluster adds workers while the group waits
                raise

    def _place(self, prefer: list[str], *, wait_for_capacity: float = 0.0) -> list[str]:
        """Workers for every rank, waiting while they are busy; ``wait_for_capacity`` seconds are
        also allowed for lost workers to come back (after a failure) before the cluster counts as too small."""
        from ..runtime.adaptive import WaitingFor, may_grow

        waited = time.monotonic()
        # while it waits, the group tells an adaptive cluster what it needs (runtime/adaptive.py)
        with WaitingFor(self.client, self.group, self.resources, self.num_workers, distinct=True) as waiting:
            return self._place_waiting(prefer, waited, wait_for_capacity, waiting, may_grow)

    def _place_waiting(self, prefer: list[str], waited: float, wait_for_capacity: float, waiting: Any,
                       may_grow: Callable[[Any], bool]) -> list[str]:
        while True:
            totals, free = self._offers()
            try:
                check_capacity(totals, self.resources, self.num_workers, what=self.name)
            except CapacityError:
                waiting.declare()
                # a worker that has just joined declares its resources a moment later (the worker plugin)
                joining = any(not total for total in totals.values()) and time.monotonic() - waited < JOIN_WAIT_S
                if time.monotonic() - waited > wait_for_capacity and not may_grow(self.client) and not joining:
                    raise
                time.sleep(0.5)
                continue
            chosen = choose_workers(free, self.resources, self.num_workers, prefer)
            if chosen is not None:
                return chosen
            waiting.declare()
            if self.placement_timeout_s is not None and time.monotonic() - waited > self.placement_timeout_s:
                raise RankFailedError(f"{self.name}: no room for {self.num_workers} rank(s) with {self.resources} "
                                      f"within {self.placement_timeout_s:g} s")
            time.sleep(0.25)

    # -- running -------------------------------------------------------------------
    def start(self, make_spec: Callable[[int, str], RankSpec], prefer: list[str] | None = None) -> None:
        """Place all ranks at once and start them; returns when every rank has started."""
        from distributed import Event, Lock

        events = self.events  # the handlers hold the queue only, not the group
        self._reports = Subscription(self.client, self._topic, events.put, owned=True)
        Event(f"{self.group}-stop", client=self.client).clear()
        with Lock(_PLACEMENT_LOCK):
            self.workers = self._place(prefer or [])
            for rank, worker in enumerate(self.workers):
                spec = make_spec(rank, worker)
                future = self.client.submit(
                    run_rank, spec, key=rank_key(self.name, rank, self.group), workers=[worker],
                    allow_other_workers=False, resources=self.resources, pure=False, retries=0)
                # watch() wakes as soon as a rank's task ends, not at its next look
                future.add_done_callback(lambda _, rank=rank: events.put({"event": "task-done", "rank": rank}))
                self.futures.append(future)
            self._wait_started()

    def _wait_started(self) -> None:
        started: set[int] = set()
        pending: list[dict[str, Any]] = []
        while len(started) < self.num_workers:
            try:
                message = self.events.get(timeout=0.5)
            except queue.Empty:
                self._check_alive()
                continue
            pending.append(message)
            if message.get("event") == "started":
                started.add(message["rank"])
        # read first by watch(): put back in the queue, they would go after reports that came since
        self._early = pending

    def _check_alive(self) -> None:
        # Asked of the scheduler directly: Client.scheduler_info() returns a cache that the
        # client's periodic refresh overwrites with no workers in it.
        alive = set(worker_addresses(self.client))
        for rank, (worker, future) in enumerate(zip(self.workers, self.futures, strict=False)):
            if future is None:  # finished, its result taken
                continue
            if future.status == "error":
                raise RankFailedError(_rank_error(rank, future))
            if worker not in alive and not future.done():
                raise RankFailedError(f"rank {rank} was lost with its worker {worker}")

    def watch(self, on_report: Callable[[dict[str, Any]], None]) -> GroupOutcome:
        """Pass rank 0's reports (with the metrics they gather from other ranks) to ``on_report``
        until every rank is done; raise if a rank fails."""
        from .gather import ReportGatherer

        reports = ReportGatherer(on_report)
        finished: set[int] = set()

        first_failure: list[str] = []

        def add(message: dict[str, Any]) -> None:
            if message.get("event") == "failed" and "error" in message and not first_failure:
                # the first rank to fail is the cause: the others may only have lost it as a peer. They
                # are waited for (a rank still running would hold its worker for the next attempt).
                first_failure.append(message["error"])
            if message.get("event") == "finished":
                finished.add(message["rank"])
                if "seconds" in message:
                    self.rank_seconds[message["rank"]] = message["seconds"]
            reports.add(message)

        for message in self._early:
            add(message)
        self._early = []
        results: dict[int, Any] = {}
        checked = time.monotonic()
        given_up: float | None = None  # once a rank failed: when the driver stops waiting for the others
        while not all(f is None or f.done() for f in self.futures):
            with contextlib.suppress(queue.Empty):
                add(self.events.get(timeout=0.25))
            if time.monotonic() - checked >= 0.25:  # also while reports keep coming
                self._collect(results)
                self._check_alive()
                checked = time.monotonic()
            if given_up is None and (first_failure or any(isinstance(r, RankFailure) for r in results.values())):
                self.request_stop()  # the others stop at their next report, or fail in their next collective
                given_up = time.monotonic() + get_settings().train_failed_grace_s
            if given_up is not None and time.monotonic() > given_up:
                break  # still running: shutdown() cancels them
        self._collect(results)
        while not self.events.empty():
            add(self.events.get_nowait())
        if len(finished) < len(self.futures):
            # a rank's events come in order, its reports before "finished": without that, reports may
            # still be on their way, and the scheduler keeps the topic's history
            time.sleep(0.05)
            for _, message in self.client.get_events(self._topic):
                add(message)
            while not self.events.empty():
                add(self.events.get_nowait())
        failures = sorted((r for r in results.values() if isinstance(r, RankFailure)), key=lambda f: f.at)
        if first_failure or failures:  # the first to fail is the cause
            raise RankFailedError(first_failure[0] if first_failure else failures[0].error)
        for rank, future in enumerate(self.futures):
            if future is not None and future.status == "error":
                raise RankFailedError(_rank_error(rank, future))
        reports.close()
        return GroupOutcome([results[rank] for rank in range(len(self.futures))])

    def _collect(self, results: dict[int, Any]) -> None:
        """Take each finished rank's result and let go of its task.

        Dask recomputes a lost result that a client still holds: a finished rank
        whose worker died later would be run again, alone, and wait for partners
        that never come. A rank's result is small (its last metrics and checkpoint).
        """
        for rank, future in enumerate(self.futures):
            if future is None or future.status != "finished":
                continue
            try:
                results[rank] = future.result(timeout=60)
            except TimeoutError as exc:
                raise RankFailedError(f"rank {rank} finished, but its result was lost with its worker "
                                      f"{self.workers[rank]}") from exc
            self.futures[rank] = None

    def answer(self, stop: bool) -> None:
        """Answer rank 0's report (when its RankSpec has ``decisions``): go on, or stop there."""
        from distributed import Queue

        Queue(self.decisions, client=self.client).put("STOP" if stop else "CONTINUE")

    def workers_alive(self) -> bool:
        """Whether every worker this group's ranks were placed on is still in the cluster (False when the
        scheduler cannot say)."""
        try:
            return set(self.workers) <= set(worker_addresses(self.client))
        except Exception:  # the scheduler went away too
            return False

    def request_stop(self) -> None:
        from distributed import Event

        Event(f"{self.group}-stop", client=self.client).set()

    def shutdown(self, grace_s: float | None = None) -> None:
        """Stop the ranks still running, end those not stopped in ``grace_s``, forget the group's state.

        A rank stops at its next report once asked to. Cancelling a rank's
        task cannot end its thread, and its worker keeps the rank's resources
        until the thread ends: so the ranks are asked first, those still
        running are ended (:func:`.rank_threads.end_ranks`: interrupted, or
        their workers restarted), and the stop event stays set for any rank
        that could not be ended.
        """
        from distributed import Event, Variable, wait

        grace_s = get_settings().train_grace_s if grace_s is None else grace_s
        running = [f for f in self.futures if f is not None and not f.done()]
        if running:
            self.request_stop()
            with contextlib.suppress(Exception):  # a timeout: cancelled below
                wait(running, timeout=grace_s)
        stragglers = [rank for rank, f in enumerate(self.futures) if f is not None and not f.done()]
        if stragglers:
            end_ranks(self.client, self.group, sorted({self.workers[rank] for rank in stragglers}), grace_s=grace_s)
            self.client.cancel([self.futures[rank] for rank in stragglers])
        if self._reports is not None:  # the scheduler forgets the group's reports too
            self._reports.close()
        self.futures = []  # release the rank tasks, so that the scheduler forgets them
        for name in ("master", "tracker", *[f"rank-{r}" for r in range(self.num_workers)]):
            with contextlib.suppress(Exception):
                Variable(f"{self.group}-{name}", client=self.client).delete()
        if not stragglers:
            with contextlib.suppress(Exception):
                Event(f"{self.group}-stop", client=self.client).clear()


def rank_key(name: str, rank: int, group: str) -> str:
    """The Dask key of a rank's task: ``<trainer>-rank<rank>-<group>``."""
    return f"{name}-rank{rank}-{group}"


def is_rank_key(key: str) -> bool:
    """Whether a Dask key names a rank's task (one :func:`rank_key` made)."""
    return "-rank" in key


def _rank_error(rank: int, future: Future) -> str:
    try:
        exc = future.exception()
    except BaseException as err:  # cancelled
        return f"rank {rank}: {type(err).__name__}"
    tb = "".join(traceback.format_exception(type(exc), exc, future.traceback())) if exc else ""
    return f"rank {rank} failed: {type(exc).__name__}: {exc}\n{tb}"
