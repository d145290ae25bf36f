"""What every control-plane handler needs: where the record is, the scheduler, the token."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ControlContext"]

_KEPT_STORES = 4
_READER_THREADS = 2


@dataclass
class ControlContext:
    """What the handlers of one server share.

    ``store_url`` is the record (None: no store configured, pages say so);
    ``scheduler`` is the ``distributed.Scheduler`` when mounted on one (None under
    ``airflowless ui``); ``token`` guards actions (and everything off loopback);
    ``loopback`` says the server listens on loopback addresses only, so reads need
    no token. ``follow_settings`` (the embedded cluster, whose scheduler lives in the
    driver process) reads the store the driver uses now — ``AIRFLOWLESS_DB`` /
    ``AIRFLOWLESS_HOME`` as they are when a request comes — instead of ``store_url``.

    >>> ctx = ControlContext("sqlite://", token="s3cret")
    >>> ctx.current_store_url(), ctx.scheduler is None, ctx.loopback
    ('sqlite://', True, True)
    """

    store_url: str | None
    scheduler: Any | None = None
    token: str | None = None
    loopback: bool = True
    follow_settings: bool = False
    token_hint: str = ""  # where users find the token: a file's path, or AIRFLOWLESS_TOKEN
    _stores: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _readers: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    waiting_reads: int = field(default=0, init=False, repr=False)  # API reads queued or running (see api.read)

    def current_store_url(self) -> str | None:
        """The URL of the record requests read now (None: there is none)."""
        if self.follow_settings:
            from ..settings import get_settings

            return get_settings().db_url
        return self.store_url

    def store(self) -> Any:
        """The opened store (once per URL), or :class:`~.errors.Unavailable` when none is configured."""
        from .errors import Unavailable

        url = self.current_store_url()
        if url is None:
            raise Unavailable("this scheduler has no airflowless store configured; set AIRFLOWLESS_DB "
                              "(or AIRFLOWLESS_HOME) where the scheduler starts")
        with self._lock:
            if url not in self._stores:
                from ..store import open_store

                try:
                    self._stores[url] = open_store(url)
                except Exception as exc:  # a StoreError: unreachable database, bad URL
                    raise Unavailable(f"cannot open the airflowless store: {exc}") from exc
                while len(self._stores) > _KEPT_STORES:  # a driver that changed stores: drop the oldest
                    self._stores.pop(next(iter(self._stores))).close()  # reads under way keep their connection
            return self._stores[url]

    def readers(self) -> ThreadPoolExecutor:
        """The threads the API reads the record in. Few of them: they share the scheduler's GIL, so a
        burst of requests from open pages waits its turn here instead of crowding the scheduler's loop."""
        with self._lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(_READER_THREADS, thread_name_prefix="airflowless-api-read")
            return self._readers

    def close(self) -> None:
        """Close the stores this context opened, and its reader threads."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
            readers, self._readers = self._readers, None
        if readers is not None:
            readers.shutdown(wait=False)
        for store in stores:
            store.close()
