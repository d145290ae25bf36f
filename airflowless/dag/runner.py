"""Running a traced pipeline on the cluster and keeping its record.

The driver lowers the graph to Dask: one task per stage, keyed
``<stage>-<token>`` so the dashboard's task stream shows stage names, each
task depending on the tasks of the stages it reads. The whole graph is handed
to the scheduler at once, so independent stages run in parallel. The driver
then only watches: it hands what it learns (attempts started, tasks ended, the
clock) to the run's rules (:mod:`.run_state`, no I/O), carries out what they
answer (submit, expand a mapped stage, cancel), and turns it into rows of the
record (it is the run's one writer).

Stages whose output is already known — a cache hit, or a finished stage of the
run being resumed — are not run; if a later stage reads them, their task loads
the stored output instead.

Every way out of :func:`execute` settles every stage row: the run ends
``succeeded`` or ``failed`` as its stages did; ``cancelled`` on SIGINT/SIGTERM or a
control-plane request (:class:`~airflowless.errors.RunCancelled`; see
:mod:`airflowless.control.actions`); ``failed`` with a
:class:`~airflowless.errors.ClusterLostError` when the scheduler goes away.
While it runs, the driver keeps a heartbeat (:mod:`.lifecycle`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..errors import (
    ClusterError,
    ClusterLostError,
    PipelineRunError,
    RunCancelled,
)
from ..integrity import SigningKeyPlugin, current_key
from ..names import join_under
from ..store.liveness import this_driver
from ..store.records import RunStatus, StageRecord, StageStatus
from .cache import cache_keys, element_key
from .fingerprint import Fingerprints
from .graph import Graph, Node, StageRef
from .interrupt import stop_stages
from .lifecycle import Heartbeat, cancel_on_signals
from .mapping import MapError, expand
from .outputs import output_exists, output_uri
from .result import RunResult
from .reuse import still_reusable
from .run_state import (
    Action,
    Cancel,
    Event,
    Expand,
    Expanded,
    Failed,
    NotExpanded,
    Record,
    Retrying,
    RunState,
    Say,
    Started,
    Submit,
    Succeeded,
    Tick,
)
from .sources import ship_sources
from .task import EVENT_TOPIC, Outcome, StageCall, load_stage_output, run_stage

if TYPE_CHECKING:
    from distributed import Client, Future

    from ..store import Store
    from .stage import Stage

__all__ = ["execute"]

log = logging.getLogger(__name__)

# The driver's rounds are at least this far apart. Stages finishing one by one would otherwise each cost a
# round (a gather, a record transaction, a look at every deferred stage): 2,000 mapped items took 15 s, not 3.
_TICK_S = 0.02

# The record of a run's stages is written at most this often while it runs (and at its end): what the pages and
# `runs show` see lags by as much; a stage that starts and ends within it costs one row write, not two.
_FLUSH_S = 0.25


@dataclass(frozen=True)
class _Plan:
    node: str
    cache_key: str
    output_uri: str
    reuse: StageRecord | None  # the earlier stage run whose output is reused
    renewed: bool = False  # runs although an earlier output may exist: what reads it runs again too


def _check_resources(client: Client, graph: Graph) -> None:
    workers = client.scheduler_info(n_workers=-1).get("workers", {}).values()
    offered = [w.get("resources", {}) for w in workers]
    for node in graph.nodes.values():
        wanted = node.stage.options.resources
        if wanted and not any(all(r.get(k, 0) >= v for k, v in wanted.items()) for r in offered):
            raise ClusterError(
                f"stage {node.name!r} asks for resources {wanted}, but no worker of the cluster "
                f"offers them (workers offer {offered or 'nothing: there are no workers'}); "
                "start workers with those resources or change @stage(resources=...)"
            )


def _register_by_value(graph: Graph) -> None:
    """Ship stage code defined outside installed packages by value, so workers need no copy."""
    import cloudpickle

    for node in graph.nodes.values():
        module = sys.modules.get(getattr(node.stage.fn, "__module__", "") or "")
        path = getattr(module, "__file__", None) or ""
        if module is None or module.__name__ == "__main__" or "site-packages" in path:
            continue
        if module.__name__.split(".")[0] in {"airflowless", "connectors"}:
            continue
        cloudpickle.register_pickle_by_value(module)


@dataclass(frozen=True)
class _Planner:
    """Decides for each stage run whether an earlier output is reused, and where its output goes."""

    store: Store
    storage: str
    run_id: int
    use_cache: bool
    resume_from: int | None
    in_resumed: dict[str, StageRecord] = field(default_factory=dict)  # key -> its output in the resumed run
    in_cache: dict[str, StageRecord] = field(default_factory=dict)  # key -> the latest output with it
    prints: Fingerprints = field(default_factory=Fingerprints)  # path arguments' files, listed once a run

    @property
    def logs(self) -> str:
        """The folder of this run's stage logs."""
        return join_under(self.storage, "runs", str(self.run_id), "logs")

    def lookup(self, keys: list[str]) -> None:
        """Find the earlier outputs of ``keys`` at once, for :meth:`plan` (a query per stage cost ~1 ms each)."""
        if self.resume_from is not None:
            self.in_resumed.update(self.store.find_outputs(keys, run_id=self.resume_from))
        if self.use_cache:
            self.in_cache.update(self.store.find_outputs(keys))

    def plan(self, name: str, stage: Stage, key: str, *, renewed: bool) -> _Plan:
        """``renewed``: it must run (what it reads runs again, or a trigger rule is about this run).

        The earlier outputs of ``key`` must have been looked up (:meth:`lookup`).
        """
        reuse = None
        if not renewed and stage.options.cache:  # a resume runs cache=False stages again: their effect may be gone
            if self.resume_from is not None:
                reuse = self.in_resumed.get(key)
            if reuse is None and self.use_cache:
                reuse = self.in_cache.get(key)
            if reuse is not None and (self._expired(stage, reuse) or still_reusable(stage, reuse) is None):
                reuse, renewed = None, True
        uri = reuse.output_uri if reuse is not None and reuse.output_uri else output_uri(
            self.storage, stage=stage.name, cache_key=key, run_id=self.run_id, node=name,
            shared=stage.options.cache and self.use_cache and not renewed)  # renewed: not over the old file
        return _Plan(name, key, uri, reuse, renewed)

    def _expired(self, stage: Stage, earlier: StageRecord) -> bool:
        """Whether ``earlier``'s output is older than the stage's ``cache_ttl`` (a reuse is as old as what it reused)."""
        ttl = stage.options.cache_ttl_s
        if ttl is None:
            return False
        made = earlier
        if earlier.reused_from_run is not None:
            made = self.store.find_outputs([earlier.cache_key], run_id=earlier.reused_from_run).get(
                earlier.cache_key, earlier)
        when = made.finished_at or made.started_at
        return when is None or (datetime.now(timezone.utc) - when).total_seconds() > ttl

    def plan_graph(self, graph: Graph, order: list[str]) -> dict[str, _Plan]:
        keys = cache_keys(graph, order, self.prints)
        self.lookup(list(keys.values()))
        plans: dict[str, _Plan] = {}
        for name in order:
            node = graph.nodes[name]
            # what reads a renewed stage runs again too; a trigger rule is about how this run's stages ended:
            # never a reused output; a mapped stage's list may differ when the stage making it runs again
            # (items are reused by value when it is the same)
            must_run = (node.stage.options.trigger != "all_success" or any(plans[up].renewed for up in node.upstream)
                        or node.mapped and isinstance(node.over, StageRef) and plans[node.over.node].reuse is None)
            plans[name] = self.plan(name, node.stage, keys[name], renewed=must_run)
        return plans


def _row(node: Node, plan: _Plan) -> dict[str, Any]:
    """A stage run's row in the record, as planned."""
    reuse = plan.reuse
    return {"node": node.name, "stage": node.stage.name, "upstream": node.upstream, "cache_key": plan.cache_key,
            "output_uri": reuse.output_uri if reuse else None,
            "status": StageStatus.CACHED if reuse else StageStatus.PENDING,
            "reused_from_run": (reuse.reused_from_run or reuse.run_id) if reuse else None,
            "output_summary": reuse.output_summary if reuse else None}


def execute(
    graph: Graph, *, module: str, params: dict[str, Any], client: Client, store: Store,
    storage: str, use_cache: bool = True, resume_from: int | None = None,
    raise_on_failure: bool = True, progress: Callable[[str, str], None] | None = None,
    timeout: float | None = None, queued_run: int | None = None,
) -> RunResult:
    """Run ``graph`` on ``client``'s cluster, recording it in ``store``; ``progress(node, what)``
    hears each stage's start, retry, success and failure as the driver learns of it.

    ``queued_run``: the id of the run the service queued for this driver to take
    (:meth:`~airflowless.store.Store.take_queued_run`), instead of a new run.
    """
    order = graph.validate()
    _check_resources(client, graph)
    _register_by_value(graph)
    ship_sources(client, (node.stage.fn for node in graph.nodes.values()))  # source lines in tracebacks
    for node in graph.nodes.values():
        node.stage.reseal()
    client.register_plugin(SigningKeyPlugin(current_key()))  # workers sign and check with our key
    if queued_run is None:
        run_id = store.create_run(graph.pipeline, module=module, params=params,
                                  address=client.scheduler.address, resumed_from=resume_from)
    else:
        store.take_queued_run(queued_run, module=module, params=params, driver=this_driver(),
                              address=client.scheduler.address)
        run_id = queued_run
    lifecycle = contextlib.ExitStack()
    lifecycle.enter_context(cancel_on_signals())
    lifecycle.enter_context(Heartbeat(store, run_id))
    try:
        planner = _Planner(store, storage, run_id, use_cache, resume_from)
        plans = planner.plan_graph(graph, order)
        store.add_stages(run_id, [_row(graph.nodes[n], p) for n, p in plans.items()])
        return _Watch(graph, order, plans, planner, client, progress, timeout).run(raise_on_failure)
    except BaseException as exc:
        raised = _settle(store, run_id, client, exc)
        if raised is exc:
            raise
        raise raised from exc
    finally:
        lifecycle.close()


def _cluster_gone(client: Client) -> bool:
    return client.status != "running"


def _settle(store: Store, run_id: int, client: Client, exc: BaseException) -> BaseException:
    """Record how the run ended after ``exc`` (every stage row settled); return what to raise."""
    if isinstance(exc, KeyboardInterrupt):
        signum = exc.signum if isinstance(exc, RunCancelled) else int(signal.SIGINT)
        reason = exc.reason if isinstance(exc, RunCancelled) else None
        status, error = RunStatus.CANCELLED, f"cancelled by {reason or signal.Signals(signum).name}"
        raised: BaseException = RunCancelled(signum, run_id, reason=reason)
    elif isinstance(exc, ClusterLostError) or _cluster_gone(client):
        raised = exc if isinstance(exc, ClusterLostError) else ClusterLostError(
            run_id, str(client.scheduler.address), _unsettled(store, run_id))
        status, error = RunStatus.FAILED, str(raised)
    else:
        status, error, raised = RunStatus.FAILED, f"{type(exc).__name__}: {exc}", exc
    with contextlib.suppress(Exception):  # the store may be what failed; readers then see "abandoned"
        if store.get_run(run_id).status == RunStatus.RUNNING:
            store.finish_run(run_id, status, error=error)
    return raised


def _unsettled(store: Store, run_id: int) -> list[str]:
    with contextlib.suppress(Exception):
        return [s.node for s in store.get_run(run_id).stages if s.status in StageStatus.UNSETTLED]
    return []


class _Watch:
    """Submits the lowered graph, carries out what the run's rules (:class:`.run_state.RunState`) answer to what
    happens, and turns it into the record."""

    def __init__(self, graph: Graph, order: list[str], plans: dict[str, _Plan], planner: _Planner,
                 client: Client, progress: Callable[[str, str], None] | None = None,
                 timeout: float | None = None) -> None:
        self.graph, self.plans, self.planner = graph, plans, planner
        self.state = RunState(graph, order, (n for n, p in plans.items() if p.reuse is not None),
                              timeout=timeout, now=time.monotonic())
        self.run_id, self.client, self.store = planner.run_id, client, planner.store
        self.progress = progress or (lambda node, what: None)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.outcomes: dict[str, Outcome] = {}
        self.futures: dict[str, Future] = {}
        self.cancel_requested: str | None = None  # who asked to cancel the run from outside (control plane)
        self.written: set[str] = set()  # stages whose output was found written after the cluster went away
        self.unwritten: dict[str, dict[str, Any]] = {}  # changes to stage rows not yet written (_flush)
        self.flushed_at = 0.0  # when they were last written (monotonic)
        # the record the stages' own open_store() opens (none for a private in-memory one)
        self.record = self.store.engine.url.render_as_string(hide_password=False) if self.store.shared else None
        self._key_of: dict[str, str] = {}  # node -> its task's key
        self.results: dict[str, Outcome] = {}  # fetched results not yet taken by _finished
        # Run ids repeat across stores (each test, each home), clusters outlive runs: a nonce keeps
        # this run's keys its own, never the still-remembered result of another store's run 1.
        self.nonce = uuid.uuid4().hex

    @property
    def order(self) -> list[str]:
        return self.state.order

    def _carry_out(self, actions: list[Action]) -> None:
        """Do what the run's rules answered, in order (consecutive submissions in one batch)."""
        batch: list[tuple[str, tuple[str, ...]]] = []
        for action in actions:
            if isinstance(action, Submit):
                batch.append((action.node, action.missing))
                continue
            if batch:
                self._submit_many(batch)
                batch = []
            if isinstance(action, Record):
                self._record(action.node, **action.fields)
            elif isinstance(action, Say):
                self.progress(action.node, action.text)
            elif isinstance(action, Expand):
                self._carry_out(self._expand(action.node))
            elif isinstance(action, Cancel):
                with contextlib.suppress(Exception):
                    self.client.cancel([self.futures[n] for n in action.nodes])
                if action.stop_code:
                    with contextlib.suppress(Exception):
                        stop_stages(self.client, self.run_id)
        if batch:
            self._submit_many(batch)

    def _submit_many(self, batch: list[tuple[str, tuple[str, ...]]]) -> None:
        """Submit the tasks of ``batch`` (node, missing inputs; inputs first) in as few calls as their resources allow.

        One ``Client.get`` per run of nodes asking for the same resources: the
        scheduler gets them in one message, and the pickle of the graph holds
        each stage's code once (a call per task pickled it again each time).
        """
        graph: dict[str, Any] = {}
        names: dict[str, str] = {}  # key -> node
        resources: dict[str, float] | None = None

        def flush() -> None:
            if graph:
                futures = self.client.get(dict(graph), list(graph), sync=False, resources=resources)
                for key, future in zip(graph, futures, strict=True):
                    self.futures[names[key]] = future
                graph.clear()
                names.clear()

        for name, missing in batch:
            node, plan = self.graph.nodes[name], self.plans[name]
            token = hashlib.sha1(f"{self.run_id}\0{name}\0{plan.cache_key}\0{self.nonce}".encode()).hexdigest()
            key = f"{node.stage.name}-{token}"
            wanted = None if plan.reuse is not None else node.stage.options.resources or None
            if wanted != resources:
                flush()
                resources = wanted
            names[key] = name
            self._key_of[name] = key
            if plan.reuse is not None:
                graph[key] = (load_stage_output, name, plan.output_uri)
                continue
            call = StageCall(self.run_id, name, node.stage, node.args, node.kwargs,
                             tuple(node.upstream), plan.output_uri, missing, self.planner.logs, self.record)
            # an input submitted in this batch is named by its key, an earlier one by its future
            inputs = [self._key_of.get(up) if self._key_of.get(up) in graph else self.futures[up]
                      for up in node.upstream if up not in missing]
            graph[key] = (run_stage, call, *inputs)
            self._record(name, task_key=key)
        flush()

    def _record(self, name: str, **fields: Any) -> None:
        """Change stage ``name``'s row: kept until :meth:`_flush` writes every change at once."""
        self.unwritten.setdefault(name, {}).update(fields)

    def _flush(self, every: float = 0.0) -> None:
        """Write the changes to stage rows made since the last flush, in one transaction (``every``: not if the
        last one was less than that many seconds ago: a stage that starts and ends between two is written once)."""
        if self.unwritten and time.monotonic() - self.flushed_at >= every:
            updates, self.unwritten = self.unwritten, {}
            self.store.update_stages(self.run_id, updates)
            self.flushed_at = time.monotonic()

    def _expand(self, name: str) -> list[Action]:
        """Make mapped stage ``name``'s items (planned, recorded) now that its list is known."""
        node = self.graph.nodes[name]
        over = self.outcomes[node.over.node].value if isinstance(node.over, StageRef) else node.over
        try:
            items, gather = expand(node, over, self.graph.id)
        except MapError as exc:
            return self.state.handle(NotExpanded(name, str(exc)))
        keys = {n: p.cache_key for n, p in self.plans.items()}
        item_keys = {item.name: element_key(item.stage, (item.args, item.kwargs), keys,
                                                 self.planner.prints) for item in items}
        self.planner.lookup(list(item_keys.values()))
        # items are reused by value although the list was made again, but not when a fixed input was made again
        source = node.over.node if isinstance(node.over, StageRef) else None
        renewed = any(self.plans[up].renewed for up in node.upstream if up != source)
        for item in items:
            self.plans[item.name] = self.planner.plan(item.name, item.stage, item_keys[item.name], renewed=renewed)
        self.store.add_stages(self.run_id, [_row(item, self.plans[item.name]) for item in items])
        self._record(name, upstream=[*node.upstream, *gather.upstream])  # what it maps over, and its items
        reused = frozenset(item.name for item in items if self.plans[item.name].reuse is not None)
        self.progress(name, f"mapped over {len(items)} items ({len(reused)} reused)")
        return self.state.handle(Expanded(name, items, gather, reused))

    def run(self, raise_on_failure: bool) -> RunResult:
        from distributed import wait

        from ..control.actions import listen, run_topic
        from ..runtime.topics import Subscription

        pending = self.state.pending  # (the state's own set: what it submits is added, what ends is taken out)
        control = contextlib.ExitStack()
        try:  # a listen() that fails closes the subscription before it
            control.enter_context(Subscription(self.client, EVENT_TOPIC, self._on_message))
            control.enter_context(listen(self.client, run_topic(self.graph.pipeline, self.run_id), self._on_control))
        except BaseException:
            control.close()
            raise
        try:
            self._carry_out(self.state.start())
            while pending:
                with contextlib.suppress(TimeoutError), self.client.as_current():  # wait() asks for the current client
                    wait([self.futures[n] for n in pending], timeout=0.25, return_when="FIRST_COMPLETED")
                if not all(self.futures[n].done() for n in pending):  # (the last ones: no one to wait for)
                    time.sleep(_TICK_S)  # let more finish: a round's work (a record write, a gather) serves them all
                self._drain_events()
                if self.cancel_requested is not None:  # as on SIGINT: futures cancelled below, run settled
                    raise RunCancelled(int(signal.SIGTERM), self.run_id, reason=self.cancel_requested)
                if _cluster_gone(self.client):  # Dask cancels every future when the scheduler is lost
                    raise self._lost()
                done = [n for n in pending if self.futures[n].done()]
                self._take_results(done)
                for name in done:
                    self._finished(name)
                self._carry_out(self.state.handle(Tick(time.monotonic())))
                self._flush(every=_FLUSH_S)
            self._drain_events()
            self._flush()
        except BaseException as exc:
            self._record_finished()
            if _cluster_gone(self.client):
                self._record_written()
            with contextlib.suppress(Exception):  # the store may be what failed
                self._flush()
            if not _cluster_gone(self.client):
                with contextlib.suppress(Exception):
                    self.client.cancel(list(self.futures.values()))
                if isinstance(exc, KeyboardInterrupt):  # cancelled: the stages' code stops too
                    self._stop_running()
            raise
        finally:
            control.close()
        if self.state.errors and _cluster_gone(self.client):
            raise self._lost()
        return self._close(raise_on_failure)

    def _stop_running(self) -> None:
        """Stop the cancelled run's stages still running on the workers, and record what was done to each."""
        try:
            stopped = stop_stages(self.client, self.run_id)
        except Exception as exc:  # the run is cancelled either way; say what could not be stopped
            log.warning("airflowless: could not stop the stages of cancelled run %s: %s", self.run_id, exc)
            return
        for node, what in stopped.items():
            with contextlib.suppress(Exception):
                self._record(node, status=StageStatus.CANCELLED,
                                        finished_at=datetime.now(timezone.utc), error=f"cancelled; its code was {what}")
            self.progress(node, f"cancelled; its code was {what}")
        with contextlib.suppress(Exception):
            self._flush()

    def _record_finished(self) -> None:
        """Record the stages that finished before the run was interrupted, not yet seen by the loop.

        (Those with a future only: a submission that failed or was interrupted made none.)
        """
        seen = self.outcomes.keys() | self.state.errors.keys()
        for name in [n for n in self.order if n in self.futures and n not in seen
                     and self.futures[n].status == "finished"]:
            with contextlib.suppress(Exception):
                self._finished(name)

    def _record_written(self) -> None:
        """Record as succeeded the stages whose output was written before the scheduler went away.

        A stage writes its output (atomically) before its task reports back: when the
        scheduler dies in between, the driver never hears of it, but the output is
        whole, and a resume of this run reuses it instead of running the stage again.
        """
        with contextlib.suppress(Exception):
            self._drain_events()  # the starts already received
        starts = self.state.starts
        for name in [n for n in self.order if n in self.state.pending and n in starts and n not in self.outcomes]:
            uri = self.plans[name].output_uri
            with contextlib.suppress(Exception):
                if self.plans[name].reuse is None and output_exists(uri):
                    self._record(
                        name, status=StageStatus.SUCCEEDED, attempts=starts[name],
                        finished_at=datetime.now(timezone.utc), output_uri=uri,
                        output_summary="(written before the cluster went away)", error=None)
                    self.written.add(name)

    def _lost(self) -> ClusterLostError:
        unfinished = [n for n in self.order if n in self.futures and n not in self.outcomes and n not in self.written]
        return ClusterLostError(self.run_id, str(self.client.scheduler.address), unfinished)

    def _on_control(self, message: dict[str, Any]) -> None:
        if message.get("action") == "cancel" and message.get("run_id") == self.run_id:
            self.cancel_requested = "a control-plane request"

    def _on_message(self, message: Any) -> None:
        if isinstance(message, dict) and message.get("run_id") == self.run_id:
            self.events.put(message)

    def _drain_events(self) -> None:
        """Hand the stages' events received so far (attempts started, retrying) to the run's rules."""
        while True:
            try:
                msg = self.events.get_nowait()
            except queue.Empty:
                return
            if msg["event"] == "started":
                event: Event = Started(msg["node"], msg["worker"], msg["time"], time.monotonic(), msg.get("log"))
            elif msg["event"] == "retrying":
                event = Retrying(msg["node"], msg["error"], msg.get("delay", 0))
            else:
                continue
            self._carry_out(self.state.handle(event))

    def _take_results(self, names: list[str]) -> None:
        """Fetch the results of the finished tasks of ``names`` in one round trip (kept for :meth:`_finished`)."""
        finished = [n for n in names if self.futures[n].status == "finished" and n not in self.results]
        if finished:
            with contextlib.suppress(Exception):  # one lost meanwhile: _finished asks for it alone
                self.results.update(zip(finished, self.client.gather([self.futures[n] for n in finished]),
                                        strict=True))

    def _finished(self, name: str) -> None:
        future = self.futures[name]
        if future.status == "finished":
            outcome: Outcome = self.results.pop(name) if name in self.results else future.result()
            self._carry_out(self.state.handle(Succeeded(name, outcome)))
            self.outcomes[name] = outcome  # (after its record: a signal before leaves it to _record_finished)
            return
        try:
            error = future.exception()
        except BaseException as exc:  # cancelled futures raise instead
            error = exc
        self._carry_out(self.state.handle(Failed(name, error)))

    def _close(self, raise_on_failure: bool) -> RunResult:
        ending = self.state.settle(datetime.now(timezone.utc))
        self._carry_out(ending.actions)
        self._flush()
        self.store.finish_run(self.run_id, ending.status, error=ending.error)
        result = RunResult(self.store.get_run(self.run_id), {n: o.value for n, o in self.outcomes.items()},
                           self.graph.result)
        if ending.failures and raise_on_failure:
            raise PipelineRunError(self.run_id, self.graph.pipeline, ending.failures)
        return result


def wait_started(store: Store, run_id: int, node: str, timeout: float = 30.0) -> StageRecord:
    """Test helper: block until ``node`` of ``run_id`` is running (or done)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record = store.get_run(run_id).stage(node)
        except KeyError:  # the run is recorded before its stages are
            record = None
        if record is not None and record.status != StageStatus.PENDING:
            return record
        time.sleep(0.1)
    raise TimeoutError(f"stage {node!r} of run {run_id} did not start within {timeout} s")
