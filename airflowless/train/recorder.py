"""Recording a training run: to the store as a one-trial experiment, or into a Tune trial.

The trainer's driver calls a recorder as the run goes; Tune passes its own
recorder so that a Trainer inside a trial writes into that trial and can be
told to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["Recorder", "StoreRecorder"]

logger = logging.getLogger(__name__)


class Recorder:
    """Hooks with no effect; subclasses record or decide.

    With ``decides_reports`` true, ``on_report`` returns only once the decision on
    that report is made, and rank 0 waits after each report for ``should_stop``'s
    answer: the run stops at the very report that was judged (a Tune scheduler
    that stops early). Otherwise ranks go on while the driver looks.
    """

    decides_reports: bool = False

    def start(self, name: str, config: dict[str, Any], storage_dir: str) -> None: ...

    def on_report(self, step: int, metrics: dict[str, Any], checkpoint_uri: str | None) -> None: ...

    def on_checkpoint_deleted(self, uri: str) -> None: ...

    def on_restart(self, restarts: int, error: str) -> None: ...

    def should_stop(self) -> bool:
        return False

    def end(self, status: str, error: str | None, metrics: dict[str, Any] | None, checkpoint_uri: str | None) -> None: ...


class StoreRecorder(Recorder):
    """A fit recorded as an experiment (kind ``train``) with one trial.

    Store errors never fail training: a write that fails is logged (a warning
    the first time, then at DEBUG) and training carries on. Reports are written
    in one transaction per ``FLUSH_S`` seconds (a report waits at most that long),
    and at once with a checkpoint, a restart or the end: a round of a
    boosting run then costs no store round trip.
    """

    FLUSH_S = 0.5

    def __init__(self) -> None:
        self.store: Any = None
        self.experiment_id: int | None = None
        self.trial_id: int | None = None
        self.failed_writes = 0
        self._pending: list[tuple[int, dict[str, Any]]] = []  # (step, metrics) not yet written
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._flushed = -float("inf")  # when reports were last written (time.monotonic)

    def _write(self, what: str, write: Callable[[], object]) -> None:
        try:
            write()
        except Exception as exc:
            self.failed_writes += 1
            level = logging.WARNING if self.failed_writes == 1 else logging.DEBUG
            logger.log(level, "could not %s in the store (%s: %s); training goes on, the record may be incomplete",
                       what, type(exc).__name__, exc)

    def start(self, name: str, config: dict[str, Any], storage_dir: str) -> None:
        from ..dag.interrupt import current_stage
        from ..store import open_store

        running = current_stage()  # asked here: the fit's own thread, which runs the stage's body

        def create() -> None:
            self.store = open_store()
            self.experiment_id = self.store.create_experiment(name, kind="train", config=config,
                                                              storage_path=storage_dir, started_by=running)
            self.trial_id = self.store.add_trial(self.experiment_id, name, config=config, status="running")

        self._write(f"record the run {name!r}", create)

    @property
    def _recording(self) -> bool:
        return self.store is not None and self.trial_id is not None and self.experiment_id is not None

    def on_report(self, step: int, metrics: dict[str, Any], checkpoint_uri: str | None) -> None:
        if not self._recording:
            return
        with self._lock:
            self._pending.append((step, metrics))
        if checkpoint_uri:
            self.flush()

            def write() -> None:
                self.store.add_checkpoint(self.trial_id, step, checkpoint_uri, metrics)
                self.store.update_trial(self.trial_id, checkpoint_uri=checkpoint_uri)

            self._write(f"record checkpoint {step}", write)
            return
        with self._lock:
            quiet = time.monotonic() - self._flushed >= self.FLUSH_S
            if not quiet and self._timer is None:
                self._timer = threading.Timer(self.FLUSH_S, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if quiet:  # the first report after a quiet spell is written at once
            self.flush()

    def flush(self) -> None:
        """Write the reports not yet written, in one transaction."""
        with self._lock:
            pending, self._pending = self._pending, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._flushed = time.monotonic()
            if not pending:
                return
            step, metrics = pending[-1]
            try:
                self.store.record_batch([(self.trial_id, s, m) for s, m in pending],
                                        {self.trial_id: {"iterations": step, "last_metrics": metrics}})
                return
            except Exception:  # one by one, each failure logged (a step written before is kept once)
                pass
            for s, m in pending:
                self._write(f"record report {s}", partial(self.store.add_metrics, self.trial_id, s, m))
            self._write(f"record report {step}",
                        lambda: self.store.update_trial(self.trial_id, iterations=step, last_metrics=metrics))

    def on_checkpoint_deleted(self, uri: str) -> None:
        if self._recording:
            self._write(f"mark checkpoint {uri} deleted", lambda: self.store.mark_checkpoint_deleted(uri))

    def on_restart(self, restarts: int, error: str) -> None:
        if self._recording:
            self.flush()
            self._write("record a restart", lambda: self.store.update_trial(self.trial_id, restarts=restarts,
                                                                               error=error))

    def end(self, status: str, error: str | None, metrics: dict[str, Any] | None, checkpoint_uri: str | None) -> None:
        if not self._recording:
            return
        self.flush()
        from datetime import datetime, timezone

        def write() -> None:
            self.store.update_trial(self.trial_id, status=status, error=error, finished_at=datetime.now(timezone.utc))
            self.store.finish_experiment(self.experiment_id, status, error=error)

        self._write(f"record the end of the run ({status})", write)
