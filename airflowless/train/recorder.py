"""Recording a training run: to the store as a one-trial experiment, or into a Tune trial.

The trainer's driver calls a recorder as the run goes; Tune passes its own
recorder so that a Trainer inside a trial writes into that trial and can be
told to stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
    the first time, then at DEBUG) and training carries on.
    """

    def __init__(self) -> None:
        self.store: Any = None
        self.experiment_id: int | None = None
        self.trial_id: int | None = None
        self.failed_writes = 0

    def _write(self, what: str, write: Callable[[], object]) -> None:
        try:
            write()
        except Exception as exc:
            self.failed_writes += 1
            level = logging.WARNING if self.failed_writes == 1 else logging.DEBUG
            logger.log(level, "could not %s in the store (%s: %s); training goes on, the record may be incomplete",
                       what, type(exc).__name__, exc)

    def start(self, name: str, config: dict[str, Any], storage_dir: str) -> None:
        from ..store import open_store

        def create() -> None:
            self.store = open_store()
            self.experiment_id = self.store.create_experiment(name, kind="train", config=config,
                                                              storage_path=storage_dir)
            self.trial_id = self.store.add_trial(self.experiment_id, name, config=config, status="running")

        self._write(f"record the run {name!r}", create)

    @property
    def _recording(self) -> bool:
        return self.store is not None and self.trial_id is not None and self.experiment_id is not None

    def on_report(self, step: int, metrics: dict[str, Any], checkpoint_uri: str | None) -> None:
        if not self._recording:
            return

        def write() -> None:
            self.store.add_metrics(self.trial_id, step, metrics)
            fields: dict[str, Any] = {"iterations": step, "last_metrics": metrics}
            if checkpoint_uri:
                self.store.add_checkpoint(self.trial_id, step, checkpoint_uri, metrics)
                fields["checkpoint_uri"] = checkpoint_uri
            self.store.update_trial(self.trial_id, **fields)

        self._write(f"record report {step}", write)

    def on_checkpoint_deleted(self, uri: str) -> None:
        if self._recording:
            self._write(f"mark checkpoint {uri} deleted", lambda: self.store.mark_checkpoint_deleted(uri))

    def on_restart(self, restarts: int, error: str) -> None:
        if self._recording:
            self._write("record a restart", lambda: self.store.update_trial(self.trial_id, restarts=restarts,
                                                                               error=error))

    def end(self, status: str, error: str | None, metrics: dict[str, Any] | None, checkpoint_uri: str | None) -> None:
        if not self._recording:
            return
        from datetime import datetime, timezone

        def write() -> None:
            self.store.update_trial(self.trial_id, status=status, error=error, finished_at=datetime.now(timezone.utc))
            self.store.finish_experiment(self.experiment_id, status, error=error)

        self._write(f"record the end of the run ({status})", write)
