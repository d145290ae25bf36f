"""The service's watchers: a thread per deployment with a file trigger, taking each new match once.

A watcher lists its pattern (:meth:`~.files.FileSpec.scan`) when it starts,
whenever the folder changes (local paths: filesystem events through
``watchfiles``), every poll interval (object stores, and local paths as a
fallback), and when a match that was still being written should have become
quiet. Each whole match the record has not seen is taken
(:meth:`Store.take_matches`): a queued run and the match's row in one
transaction, so a second service watching the same pattern, or this one
restarted, never takes it again. The service's main loop is woken at once, so
the run's driver starts without waiting for the next tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .files import FileSpec, Match, filesystem

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["FileWatch"]

log = logging.getLogger(__name__)

_NO_EVENTS_POLL_S = 1.0  # a local pattern without filesystem events is listed this often
_RETRY_S = 5.0  # after a listing or the record failed


class FileWatch:
    """Watches deployment ``deployment``'s pattern until :meth:`stop`; ``wake`` is called after each run queued."""

    def __init__(self, store: Store, deployment: dict[str, Any], wake: Callable[[], None]) -> None:
        self.store = store
        self.deployment = deployment
        self.spec = FileSpec.from_json(deployment["on_files"])
        self.version = deployment["updated_at"]
        self.wake = wake
        self.poll_s = self.spec.poll
        self.error: str | None = None
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name=f"watch-{deployment['name']}", daemon=True)

    def start(self) -> FileWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        name = self.deployment["name"]
        log.info("deployment %s: watching %s", name, self.spec.describe())
        self._listen()
        fs: Any = None
        while not self._stop.is_set():
            wait = self.poll_s
            try:
                if fs is None:
                    fs = filesystem(self.spec)
                    self._seen = self.store.seen_keys(self.deployment["id"])
                found, wake_at = self.spec.scan(fs, skip=self._seen)
                self._take(found)
                if wake_at is not None:
                    wait = min(wait, max(0.05, wake_at - time.time()))
                self.error = None
            except Exception as exc:  # the storage or the record failed for a moment: look again later
                if self.error is None:
                    log.warning("deployment %s: cannot watch %s (%s: %s); trying again every %g s", name,
                                self.spec.pattern, type(exc).__name__, exc, _RETRY_S)
                self.error = f"{type(exc).__name__}: {exc}"
                fs, wait = None, _RETRY_S
            self._changed.wait(wait)
            self._changed.clear()

    def _take(self, found: dict[str, Match]) -> None:
        new = [found[key] for key in sorted(found) if key not in self._seen and found[key].ready]
        if not new:
            return
        for group in [new] if self.spec.batch else [[match] for match in new]:
            what = "folder" if self.spec.partitions else "file"
            detail = (f"{len(group)} new files under {self.spec.root}" if self.spec.batch else
                      f"new {what} {group[0].describe()}")
            run_id = self.store.take_matches(self.deployment, group, self.spec.values(group), detail)
            self._seen.update(match.key for match in group)  # taken here, or by another service first
            if run_id is not None:
                log.info("deployment %s: run %d queued for %s", self.deployment["name"], run_id, detail)
                self.wake()

    def _listen(self) -> None:
        """Wake the loop on each change under a local pattern's root (``watchfiles``); poll often without it."""
        if not self.spec.local:
            return
        try:
            import watchfiles
        except ImportError:
            self.poll_s = min(self.poll_s, _NO_EVENTS_POLL_S)
            return
        root = self.spec.root.removeprefix("file://")

        def listen() -> None:
            try:
                for _ in watchfiles.watch(root, watch_filter=None, debounce=200, step=20, stop_event=self._stop,
                                          raise_interrupt=False):
                    self._changed.set()
            except Exception as exc:  # the folder went away, or too many watches: polling still works
                log.warning("deployment %s: no filesystem events for %s (%s); listing it every %g s",
                            self.deployment["name"], root, exc, _NO_EVENTS_POLL_S)
                self.poll_s = min(self.poll_s, _NO_EVENTS_POLL_S)

        threading.Thread(target=listen, name=f"events-{self.deployment['name']}", daemon=True).start()
