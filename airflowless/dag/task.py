"""What runs on a Dask worker for one stage: the stage's task.

The task unwraps its upstream outcomes, runs the stage function with retries
and a deadline, writes the output to storage, and reports progress as Dask
events (topic :data:`EVENT_TOPIC`), which the driver turns into the record.

A task that Dask runs a second time (its worker died after it finished, and a
downstream task still needed the result) finds the written output and loads
it instead of running the stage again.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from ..errors import Skip, StageFailedError, StageSkipped, StageTimeoutError
from ..store.current import recording_to
from .deadline import DeadlineExceeded, deadline
from .graph import StageRef, map_refs
from .interrupt import stage_thread
from .logs import capture, log_name
from .outputs import output_exists, read_output, summarize, write_output
from .persist import persist_datasets
from .stage import Stage

__all__ = ["StageCall", "Outcome", "run_stage", "load_stage_output", "EVENT_TOPIC"]

EVENT_TOPIC = "airflowless-stage"


@dataclass(frozen=True)
class StageCall:
    """Everything a worker needs to run one node of a run."""

    run_id: int
    node: str
    stage: Stage
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    upstream: tuple[str, ...]
    output_uri: str
    missing: tuple[str, ...] = ()  # upstream stages that did not succeed (a trigger rule ran it anyway): None
    logs: str | None = None  # the folder of the run's stage logs (:mod:`.logs`); None: not kept
    # the run's record, which the stage's own open_store() opens (store.current); never in a repr (a password)
    record: str | None = field(default=None, repr=False)

    def log_uri(self, attempt: int) -> str | None:
        return None if self.logs is None else f"{self.logs.rstrip('/')}/{log_name(self.node, attempt)}"

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        """Who it is, not its whole content: Dask tokenizes every graph it is given (one node of one run)."""
        return ("airflowless-stage-call", self.run_id, self.node, self.output_uri, self.missing)


@dataclass(frozen=True)
class Outcome:
    """A finished stage: its value and how it went."""

    node: str
    value: Any
    started: float
    finished: float
    attempts: int
    worker: str | None
    output_uri: str
    summary: str
    reused: bool = False


def _worker() -> Any:
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def _emit(call: StageCall, event: str, **data: Any) -> None:
    worker = _worker()
    if worker is not None:
        worker.log_event(EVENT_TOPIC, {"run_id": call.run_id, "node": call.node, "event": event,
                                       "worker": worker.address, "time": time.time(), **data})


def run_stage(call: StageCall, *upstream: Outcome) -> Outcome:
    """Run ``call`` with its upstream outcomes; the body of a stage's Dask task."""
    worker = _worker()
    address = worker.address if worker is not None else None
    started = time.time()
    if output_exists(call.output_uri):
        value = read_output(call.output_uri)
        return Outcome(call.node, value, started, time.time(), 0, address, call.output_uri,
                       summarize(value), reused=True)
    values = {outcome.node: outcome.value for outcome in upstream}
    values.update(dict.fromkeys(call.missing))
    args, kwargs = map_refs((call.args, call.kwargs), lambda ref: values[_name(ref)])
    options = call.stage.options
    attempt = 0
    while True:
        attempt += 1
        log_uri = call.log_uri(attempt)
        _emit(call, "started", attempt=attempt, log=log_uri)
        try:
            with capture(log_uri) as log:
                try:
                    with stage_thread(call.run_id, call.node), recording_to(call.record), \
                            deadline(options.timeout):  # a cancel interrupts it
                        value = call.stage.fn(*args, **kwargs)
                except BaseException:
                    if log is not None:  # the log says how the attempt ended, too
                        log.write(traceback.format_exc())
                    raise
            break
        except Skip as skip:  # not a failure: never retried
            _emit(call, "skipped", attempt=attempt, reason=skip.reason)
            raise StageSkipped(call.node, skip.reason) from None
        except DeadlineExceeded:
            error: BaseException = StageTimeoutError(call.stage.name, options.timeout or 0)
            text = str(error)
        except Exception as exc:
            error = exc
            text = traceback.format_exc()
        if attempt > options.retries or not _still_wanted():
            _emit(call, "failed", attempt=attempt, error=_one_line(error))
            raise StageFailedError(call.node, _one_line(error), text)
        delay = options.delay(attempt)
        _emit(call, "retrying", attempt=attempt, error=_one_line(error), delay=delay)
        _wait_to_retry(delay)
        if not _still_wanted():  # the driver gave up on it while it waited
            _emit(call, "failed", attempt=attempt, error=_one_line(error))
            raise StageFailedError(call.node, _one_line(error), text)
    try:  # what is kept must outlive this cluster: datasets' blocks go to parquet first
        value = persist_datasets(value, _data_folder(call.output_uri))
        write_output(call.output_uri, value)
    except Exception as exc:
        _emit(call, "failed", attempt=attempt, error=_one_line(exc))
        raise StageFailedError(call.node, _one_line(exc), traceback.format_exc()) from None
    return Outcome(call.node, value, started, time.time(), attempt, address, call.output_uri,
                   summarize(value))


SECEDE_AFTER_S = 5.0
"""A wait to retry at least this long gives the worker thread back; a shorter one keeps it."""


def _wait_to_retry(delay: float) -> None:
    """Wait ``delay`` seconds; from :data:`SECEDE_AFTER_S` on, without holding one of the worker's threads.

    The task leaves the worker's pool while it waits (Dask's ``secede``, as a task
    that waits on others does), so the worker runs other tasks meanwhile, and takes
    a thread again after (``rejoin``: when the worker is busy, the next attempt
    waits for a free thread, as a new task would). A short wait is not worth that.
    """
    if delay <= 0:
        return
    if _worker() is None or delay < SECEDE_AFTER_S:
        time.sleep(delay)
        return
    from distributed import rejoin, secede

    secede()
    try:
        time.sleep(delay)
    finally:
        rejoin()


def _still_wanted() -> bool:
    """False when the driver gave up on this task (it cancelled it): do not retry for nobody."""
    worker = _worker()
    if worker is None:
        return True
    from .._dask_internals import current_task_key

    key = current_task_key()
    ts = worker.state.tasks.get(key) if key is not None else None
    return ts is None or ts.state not in ("cancelled", "released", "forgotten")


def load_stage_output(node: str, uri: str) -> Outcome:
    """A cached or resumed stage: its output read back from storage."""
    now = time.time()
    worker = _worker()
    value = read_output(uri)
    return Outcome(node, value, now, time.time(), 0, worker.address if worker else None, uri,
                   summarize(value), reused=True)


def _data_folder(output_uri: str) -> str:
    """Where the files of an output's datasets go: beside the output, ``<output>.data/``."""
    return output_uri.removesuffix(".pkl") + ".data"


def _name(ref: StageRef) -> str:
    return ref.node


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
