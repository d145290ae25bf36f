"""One door to Dask's event topics: listen on a topic, then leave nothing behind.

Workers report to their driver on Dask event topics (``log_event``): a run's
stages, a fit's ranks, a Tuner's trials, and the control plane's requests.
Listening right takes four steps that are easy to get half right, so every
listener in airflowless goes through :class:`Subscription`:

1. subscribe, calling the handler with each event's message (not Dask's
   ``(timestamp, message)`` pair);
2. on close, unsubscribe (nothing is sent to a scheduler that is gone);
3. drop the handler from the client (``Client.unsubscribe_topic`` leaves it
   there, keeping what it closes over alive for the client's life);
4. for an *owned* topic (one of a single listener: a fit's, an
   experiment's), make the scheduler forget the topic and every event it kept
   (:func:`~airflowless._dask_internals.close_topic`).

Without a handler, messages go to the subscription's ``queue``::

    with Subscription(client, f"fit-{group}", owned=True) as reports:
        ...  # the ranks call log_event(f"fit-{group}", {"rank": 0, "loss": 0.5})
        message = reports.queue.get(timeout=1)

Owned topics are closed only from a synchronous client (:func:`close_topic`
asks the scheduler and waits); an asynchronous one (serve's controller)
unsubscribes and drops its handler, which every topic it listens on allows.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable
from typing import Any

from .._dask_internals import close_topic, forget_topic_handler, quiet_late_topic_events

__all__ = ["Subscription"]


class Subscription:
    """``client`` listening on ``topic`` until :meth:`close` (or the end of a ``with`` block).

    ``handler(message)`` runs on the client's event loop for each event: it
    should only hand the message over (put it in a queue, set a flag). With
    no handler, messages go to :attr:`queue`. ``owned``: this client is the
    topic's one listener, and the scheduler forgets the topic on close.
    """

    def __init__(self, client: Any, topic: str, handler: Callable[[Any], None] | None = None, *,
                 owned: bool = False) -> None:
        self.client, self.topic, self.owned = client, topic, owned
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        deliver = handler or self.queue.put
        self._open = True
        quiet_late_topic_events()  # an event on its way when this closes: distributed would log a traceback
        client.subscribe_topic(topic, lambda event: deliver(event[1]))

    def close(self) -> None:
        """Stop listening (once; later calls do nothing)."""
        if not self._open:
            return
        self._open = False
        client = self.client
        if self.owned and not client.asynchronous:
            with contextlib.suppress(Exception):  # the cluster may be going
                close_topic(client, self.topic)
            return
        try:
            if client.status == "running":  # else the scheduler is gone or going: nothing to tell it
                with contextlib.suppress(Exception):
                    client.unsubscribe_topic(self.topic)
        finally:
            forget_topic_handler(client, self.topic)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
