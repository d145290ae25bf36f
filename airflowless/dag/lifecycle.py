"""What a run's driver does besides watching its stages: a heartbeat, and signals.

While a run is on the cluster, its driver

- touches the run's heartbeat every ``AIRFLOWLESS_HEARTBEAT_S``
  seconds from a small daemon thread (:class:`Heartbeat`), so readers on other
  hosts can tell a live driver from a dead one;
- turns SIGINT and SIGTERM into :class:`~airflowless.errors.RunCancelled`
  (:func:`cancel_on_signals`), so the run and its stages are recorded as
  ``cancelled`` before the process exits with ``128 + signal``.

A driver killed outright (SIGKILL) does neither; readers then see the run as
``abandoned`` (:mod:`airflowless.store.liveness`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from ..errors import RunCancelled
from ..settings import get_settings

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["Heartbeat", "cancel_on_signals"]


class Heartbeat:
    """A daemon thread that calls ``store.heartbeat(run_id)`` until stopped.

    >>> with Heartbeat(store, run_id):    # doctest: +SKIP
    ...     watch_the_run()
    """

    def __init__(self, store: Store, run_id: int, interval: float | None = None) -> None:
        self.store, self.run_id = store, run_id
        self.interval = get_settings().heartbeat_s if interval is None else interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"airflowless-heartbeat-{run_id}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # a missed beat is retried at the next one
                self.store.heartbeat(self.run_id)

    def __enter__(self) -> Heartbeat:
        if self.store.shared:  # nobody else can read an in-memory store
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def _raise_cancelled(signum: int, _frame: FrameType | None) -> None:
    raise RunCancelled(signum)


@contextlib.contextmanager
def cancel_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`RunCancelled` in the main thread.

    Handlers the program installed itself are left alone, and so is everything
    off the main thread (signals are only delivered there).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    previous = {sig: signal.getsignal(sig) for sig in defaults}
    ours = [sig for sig, handler in previous.items() if handler is defaults[sig]]
    for sig in ours:
        signal.signal(sig, _raise_cancelled)
    try:
        yield
    finally:
        for sig in ours:
            signal.signal(sig, previous[sig])
