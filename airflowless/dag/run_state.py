"""The rules of a pipeline run: events in, actions out, no I/O.

The driver (:mod:`.runner`) owns the Dask futures and the record. It tells the
run's :class:`RunState` what it learnt — an attempt started or is retrying, a
task succeeded or failed, a mapped stage's items were made, the clock moved on
— and carries out the answer: submit these stages (reading ``None`` for the
inputs named missing), make a mapped stage's items, cancel these tasks, write
these fields into stage rows, tell the user. When nothing is left to wait for,
:meth:`RunState.settle` says how each stage and the run ended.

The rules kept here:

- which stages wait for their inputs' stages to end before they are submitted
  (a trigger rule other than ``all_success``, a mapped stage, and whatever reads
  one), and whether each then runs or is kept from running;
- how many items of a mapped stage run at once (its ``concurrency``);
- attempts are counted from the attempts' start events: a task that Dask runs
  again after its worker died starts over at attempt 1, but it is another one;
- an attempt's hard deadline is its timeout plus a grace (:data:`GRACE_S`, or a
  tenth of the timeout): a stage blocked in C code notices its own deadline
  only when the call returns, so past it the driver stops waiting, and what
  reads the stage is cancelled; waiting to retry is not running;
- the run's timeout stops its stages but not its clean-up stages (those with a
  trigger rule), which run next;
- a stage that did not succeed is recorded as failed, skipped (by itself, by
  its trigger rule, or because a stage it reads failed or skipped), or
  cancelled (the run timed out).

>>> from airflowless.dag.graph import Graph, Node
>>> from airflowless.dag.stage import stage
>>> @stage
... def step(*inputs: int) -> int: ...
>>> graph = Graph("example")
>>> first = graph.add(Node("first", step, (), {}))
>>> _ = graph.add(Node("second", step, (first,), {}))
>>> state = RunState(graph, graph.validate())
>>> state.start()
[Submit(node='first', missing=()), Submit(node='second', missing=())]
>>> state.handle(Failed("first", ValueError("no")))  # Dask hands the error on to "second"
[]
>>> state.handle(Failed("second", ValueError("no")))
[]
>>> ending = state.settle(now=_utc(0))
>>> ending.status, [(a.node, a.fields["status"]) for a in ending.actions if isinstance(a, Record)]
('failed', [('first', 'failed'), ('second', 'skipped')])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..errors import StageFailedError, StageSkipped, StageTimeoutError
from ..store.records import RunStatus, StageStatus

if TYPE_CHECKING:
    from .graph import Graph, Node
    from .task import Outcome

__all__ = [
    "RunState", "Ending", "GRACE_S",
    "Started", "Retrying", "Succeeded", "Failed", "Expanded", "NotExpanded", "Tick", "Event",
    "Submit", "Expand", "Cancel", "Record", "Say", "Action",
]

GRACE_S = 5.0  # how long past its timeout the driver waits for a blocked stage (at least)

_UPSTREAM_TIMED_OUT = "cancelled: an upstream stage timed out"


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, timezone.utc)


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    """An attempt of ``node`` started on ``worker`` at ``at`` (the worker's clock, epoch seconds)."""

    node: str
    worker: str
    at: float
    now: float  # the driver's monotonic clock when it heard
    log: str | None = None


@dataclass(frozen=True)
class Retrying:
    """An attempt of ``node`` failed with ``error``; the next one starts in ``delay`` seconds."""

    node: str
    error: str
    delay: float


@dataclass(frozen=True)
class Succeeded:
    """``node``'s task finished: it ran, or it read back an earlier output."""

    node: str
    outcome: Outcome


@dataclass(frozen=True)
class Failed:
    """``node``'s task failed with ``error`` (its own, or one Dask handed on from a task it reads)."""

    node: str
    error: BaseException


@dataclass(frozen=True)
class Expanded:
    """Mapped stage ``node``'s items were made (and recorded); ``gather`` becomes ``node``, reading them."""

    node: str
    items: list[Node]
    gather: Node
    reused: frozenset[str]  # the items whose earlier output is reused


@dataclass(frozen=True)
class NotExpanded:
    """What mapped stage ``node`` got cannot be mapped over (``why``)."""

    node: str
    why: str


@dataclass(frozen=True)
class Tick:
    """A round of the driver ended (``now``: its monotonic clock): deadlines, the run's timeout, releases."""

    now: float


Event = Started | Retrying | Succeeded | Failed | Expanded | NotExpanded | Tick


# -- actions -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Submit:
    """Submit ``node``'s task, reading ``None`` for the inputs of ``missing`` (they did not succeed)."""

    node: str
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expand:
    """Make mapped stage ``node``'s items now that its list is known, then tell :class:`Expanded`."""

    node: str


@dataclass(frozen=True)
class Cancel:
    """Cancel these nodes' tasks; ``stop_code``: also stop the run's stage code still running on workers."""

    nodes: tuple[str, ...]
    stop_code: bool = False


@dataclass(frozen=True)
class Record:
    """Write ``fields`` into ``node``'s row of the record."""

    node: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Say:
    """Tell the user ``text`` about ``node``."""

    node: str
    text: str


Action = Submit | Expand | Cancel | Record | Say


@dataclass(frozen=True)
class Ending:
    """How a run ended: its status, its error line, the failed stages' tracebacks, and the rows to write."""

    status: str
    error: str | None
    failures: dict[str, str]
    actions: list[Action] = field(default_factory=list)


class RunState:
    """One run of ``graph`` (``order``: inputs first; ``reused``: nodes whose earlier output is reused).

    ``graph`` and ``order`` are the run's own: expanding a mapped stage adds its items to both.
    """

    def __init__(self, graph: Graph, order: list[str], reused: Iterable[str] = (), *,
                 timeout: float | None = None, now: float = 0.0) -> None:
        self.graph, self.order, self.reused = graph, order, set(reused)
        self.timeout = timeout
        self.run_deadline = None if timeout is None else now + timeout
        self.submitted: set[str] = set()
        self.pending: set[str] = set()  # submitted and not yet ended (nor given up on): what the driver waits for
        self.succeeded: set[str] = set()
        self.errors: dict[str, BaseException] = {}
        self.starts: dict[str, int] = {}  # attempts started, on any worker
        self.deadlines: dict[str, float] = {}  # hard deadlines of running attempts (the driver's clock)
        self.deferred = self._deferred()  # submitted once their inputs' stages ended
        self.expanding: set[str] = set()  # mapped stages asked to be expanded (Expand), not yet told (Expanded)
        self.items: dict[str, list[str]] = {}  # mapped stages, once expanded: their items
        self.queued: dict[str, list[str]] = {}  # items of mapped stages not yet submitted (their concurrency)
        self.not_run: dict[str, str] = {}  # stages a trigger rule kept from running: why
        self.timed_out: set[str] = set()  # stages stopped because the run ran past its timeout

    def _deferred(self) -> list[str]:
        """The stages to run with a trigger rule other than all_success or mapped, and every stage downstream of one."""
        found: set[str] = set()
        for name, node in self.graph.nodes.items():
            if name not in self.reused and (node.stage.options.trigger != "all_success" or node.mapped):
                found |= {name} | self.graph.downstream(name)
        return [name for name in self.order if name in found]

    # -- stimuli -------------------------------------------------------------------------
    def start(self) -> list[Action]:
        """The run begins: submit the stages to run (and the reused ones they read) that wait for nothing."""
        to_run = [name for name in self.order if name not in self.reused]
        needed = set(to_run).union(*(self.graph.nodes[name].upstream for name in to_run))
        return self._submit([n for n in self.order if n in needed and n not in self.deferred]) + self._release()

    def handle(self, event: Event) -> list[Action]:
        if isinstance(event, Tick):
            return self._tick(event.now)
        if isinstance(event, Expanded):
            return self._expanded(event)
        if isinstance(event, NotExpanded):
            self.expanding.discard(event.node)
            self.deferred.remove(event.node)
            self.errors[event.node] = StageFailedError(event.node, event.why)
            return self._release()
        if isinstance(event, Succeeded):
            return self._succeeded(event.node, event.outcome)
        if isinstance(event, Failed):
            self.pending.discard(event.node)
            self.errors[event.node] = event.error
            return []
        if event.node in self.succeeded or event.node in self.errors:
            return []  # a late event of a stage already ended
        if isinstance(event, Started):
            return self._started(event)
        self.deadlines.pop(event.node, None)  # retrying: waiting is not running past the timeout
        return [Record(event.node, {"error": event.error}),
                Say(event.node, f"failed ({event.error}); retrying in {event.delay:.3g} s")]

    def _started(self, event: Started) -> list[Action]:
        name = event.node
        attempt = self.starts[name] = self.starts.get(name, 0) + 1
        fields: dict[str, Any] = {"status": StageStatus.RUNNING, "attempts": attempt,
                                  "worker": event.worker, "log_uri": event.log}
        if attempt == 1:
            fields["started_at"] = _utc(event.at)
        timeout = self.graph.nodes[name].stage.options.timeout
        if timeout is not None:
            self.deadlines[name] = event.now + timeout + max(GRACE_S, 0.1 * timeout)
        return [Record(name, fields), Say(name, f"started (attempt {attempt}) on {event.worker}")]

    def _succeeded(self, name: str, outcome: Outcome) -> list[Action]:
        self.pending.discard(name)
        self.succeeded.add(name)
        if name in self.reused:
            return [Say(name, "reused an earlier output")]  # recorded as cached when planned
        took = outcome.finished - outcome.started
        fields: dict[str, Any] = {
            "status": StageStatus.SUCCEEDED, "attempts": max(outcome.attempts, self.starts.get(name, 0), 1),
            "worker": outcome.worker, "finished_at": _utc(outcome.finished), "duration_s": took,
            "output_uri": outcome.output_uri, "output_summary": outcome.summary, "error": None}
        if name not in self.starts:  # it ended before its start event arrived: the task says when it began
            fields["started_at"] = _utc(outcome.started)
        if name in self.items:
            fields["output_summary"] = self._map_summary(name)
        return [Record(name, fields), Say(name, f"succeeded in {took:.2f}s")]

    def _expanded(self, event: Expanded) -> list[Action]:
        name, items = event.node, [item.name for item in event.items]
        self.expanding.discard(name)
        for item in event.items:
            self.graph.nodes[item.name] = item
        at = self.order.index(name)
        self.order[at:at] = items
        self.graph.nodes[name] = event.gather
        self.items[name] = items
        self.reused |= event.reused
        self.queued[name] = [item for item in items if item not in event.reused]
        return self._submit([item for item in items if item in event.reused]) + self._release()  # read back

    def _tick(self, now: float) -> list[Action]:
        actions = self._enforce_deadlines(now)
        if self.run_deadline is not None and now > self.run_deadline:
            actions += self._time_out()
        return actions + self._release()

    # -- rules ---------------------------------------------------------------------------
    def ended(self, name: str) -> str | None:
        """How stage ``name`` ended: succeeded, failed or skipped; None while it has not."""
        if name in self.succeeded or (name in self.reused and name not in self.submitted):
            return "succeeded"
        if name in self.not_run:
            return "skipped"
        error = self.errors.get(name)
        if error is None:
            return None
        if isinstance(error, StageFailedError | StageSkipped) and error.stage == name:
            return "skipped" if isinstance(error, StageSkipped) else "failed"
        # not run for a stage upstream of it (Dask hands that stage's error on), or lost (a worker died)
        return "skipped" if any(self.ended(up) in ("failed", "skipped")
                                for up in self.graph.nodes[name].upstream) else "failed"

    def _submit(self, names: list[str], missing: tuple[str, ...] = ()) -> list[Action]:
        self.submitted.update(names)
        self.pending.update(names)
        return [Submit(name, missing) for name in names]

    def _release(self) -> list[Action]:
        """Submit queued items and the deferred stages whose inputs' stages all ended, or keep them from running."""
        actions = self._top_up()
        moved = True
        while moved:  # a stage kept from running, or a mapped stage over no items, may release the next at once
            moved = False
            for name in list(self.deferred):
                released = self._release_one(name)
                if released is not None:
                    actions += released
                    moved = True
        return actions

    def _top_up(self) -> list[Action]:
        """Submit queued items of mapped stages, as many as each one's concurrency allows."""
        actions: list[Action] = []
        for name, queued in list(self.queued.items()):
            limit = self.graph.nodes[queued[0]].stage.options.concurrency if queued else None
            take = len(queued)
            if limit is not None:
                running = sum(1 for item in self.items[name] if item in self.pending)
                take = max(0, min(take, limit - running))
            batch, queued[:take] = queued[:take], []
            actions += self._submit(batch)
            if not queued:
                del self.queued[name]  # all submitted: no need to look at it again
        return actions

    def _release_one(self, name: str) -> list[Action] | None:
        """What deferred stage ``name`` does now that its inputs' stages ended; None while they have not."""
        if name in self.expanding:
            return None
        upstream = self.graph.nodes[name].upstream
        ended = {up: self.ended(up) for up in upstream}
        if any(how is None for how in ended.values()):
            return None
        failed = [up for up, how in ended.items() if how == "failed"]
        not_ok = tuple(up for up, how in ended.items() if how != "succeeded")
        if name in self.items:  # every item ended: gather their outputs, or fail for those that failed
            self.deferred.remove(name)
            if failed:
                self.errors[name] = StageFailedError(name, f"{len(failed)} of {len(upstream)} items failed "
                                                           f"(first: {failed[0]})")
                return []
            return self._submit([name], missing=not_ok)  # items that skipped themselves are None
        if self.graph.nodes[name].mapped and not not_ok:
            self.expanding.add(name)  # stays deferred until its items ended
            return [Expand(name)]
        self.deferred.remove(name)
        trigger = self.graph.nodes[name].stage.options.trigger
        if trigger == "all_success" and not_ok:
            self.not_run[name] = (f"skipped: upstream stage {not_ok[0]!r} "
                                  f"{'failed' if not_ok[0] in failed else 'was skipped'}")
        elif trigger == "one_failed" and not failed:
            self.not_run[name] = "skipped: no upstream stage failed (trigger one_failed)"
        else:
            return self._submit([name], missing=not_ok)
        return [Say(name, self.not_run[name])]

    def _enforce_deadlines(self, now: float) -> list[Action]:
        """Give up on attempts that outlived their hard deadline, and on what reads them."""
        dropped: set[str] = set()
        for name in [n for n in self.pending if n in self.deadlines and now > self.deadlines[n]]:
            stage = self.graph.nodes[name].stage
            self.errors[name] = StageFailedError(
                name, str(StageTimeoutError(stage.name, stage.options.timeout or 0)),
                "the stage did not return within its timeout (it was blocked outside Python code)")
            for other in {name} | self.graph.downstream(name):
                if other in self.pending:
                    dropped.add(other)
                    self.errors.setdefault(other, RuntimeError(_UPSTREAM_TIMED_OUT))
        self.pending -= dropped
        return [Cancel(tuple(n for n in self.order if n in dropped))] if dropped else []

    def _time_out(self) -> list[Action]:
        """The run ran past its timeout: stop its stages (not its clean-up stages, which run next)."""
        self.run_deadline = None
        why = f"cancelled: the run timed out after {self.timeout:g} s (@pipeline(timeout=...))"
        stopping = {n for n in self.pending if n not in self.deferred}
        queued = {item for items in self.queued.values() for item in items}
        for items in self.queued.values():
            items.clear()
        self.pending -= stopping
        actions: list[Action] = [Cancel(tuple(n for n in self.order if n in stopping), stop_code=True)]
        for name in [n for n in self.order if n in stopping or n in queued]:
            if name not in self.starts and any(up in self.timed_out for up in self.graph.nodes[name].upstream):
                self.errors[name] = RuntimeError(_UPSTREAM_TIMED_OUT)  # recorded skipped
                continue
            self.timed_out.add(name)
            self.errors[name] = StageFailedError(name, why)
            actions.append(Say(name, why))
        return actions

    def _map_summary(self, name: str) -> str:
        """How the items of mapped stage ``name`` went: ``40 items: 38 succeeded, 2 reused (3 retried)``."""
        items = self.items[name]
        counts = {"succeeded": 0, "reused": 0, "skipped": 0}
        for item in items:
            how = "reused" if item in self.reused else self.ended(item) or "succeeded"
            counts[how] = counts.get(how, 0) + 1
        retried = sum(1 for item in items if self.starts.get(item, 0) > 1)
        said = ", ".join(f"{n} {how}" for how, n in counts.items() if n or how == "succeeded")
        return f"{len(items)} items: {said}" + (f" ({retried} retried)" if retried else "")

    # -- the end -------------------------------------------------------------------------
    def settle(self, now: datetime) -> Ending:
        """How each stage that did not succeed is recorded, and how the run ended (``now``: its end)."""
        actions: list[Action] = []
        failures: dict[str, str] = {}  # a failed stage -> its traceback
        said: dict[str, str] = {}  # a failed stage -> its error on one line
        failed_or_skipped: set[str] = set()
        for name in self.order:
            if name in self.not_run:
                actions.append(Record(name, {"status": StageStatus.SKIPPED, "error": self.not_run[name]}))
                continue
            error = self.errors.get(name)
            if error is None:
                continue
            failed_or_skipped.add(name)
            if name in self.timed_out:
                failures[name], said[name] = str(error), getattr(error, "message", str(error))
                actions.append(Record(name, {"status": StageStatus.CANCELLED, "finished_at": now,
                                             "error": said[name]}))
                continue
            own = isinstance(error, StageFailedError | StageSkipped) and error.stage == name
            if isinstance(error, StageSkipped) and own:
                why = f"skipped: {error.reason}" if error.reason else "skipped by the stage (airflowless.Skip)"
                actions += [Record(name, {"status": StageStatus.SKIPPED, "finished_at": now, "error": why}),
                            Say(name, why)]
                continue
            if not own and any(up in failed_or_skipped for up in self.graph.nodes[name].upstream):
                why = ("skipped: an upstream stage skipped itself" if isinstance(error, StageSkipped)
                       else "skipped: an upstream stage failed")
                actions += [Record(name, {"status": StageStatus.SKIPPED, "error": why}), Say(name, why)]
                continue
            message = error.message if isinstance(error, StageFailedError) else f"{type(error).__name__}: {error}"
            text = error.traceback if isinstance(error, StageFailedError) and error.traceback else message
            failures[name], said[name] = text, message
            actions += [Record(name, {"status": StageStatus.FAILED, "finished_at": now, "error": message,
                                      "traceback": text}),
                        Say(name, f"failed: {message}")]
        status = RunStatus.FAILED if failures else RunStatus.SUCCEEDED
        # what the run's error box, `runs list` and alerts say: each failed stage with its error, not its name alone
        summary = "; ".join(f"stage {name} failed: {said[name]}" for name in sorted(failures)) or None
        if self.timed_out:
            status, summary = RunStatus.TIMED_OUT, f"the run timed out after {self.timeout:g} s; stopped: {summary}"
        return Ending(status, summary, failures, actions)
