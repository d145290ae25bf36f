"""Telling people when a deployment's run ends: webhooks, written in the record before they are sent.

A deployment's ``notify`` lists what to send on which end: ``--notify
on_failure=webhook:env:OPS_HOOK`` posts a JSON message to the URL held in the
service's environment variable ``OPS_HOOK`` (or ``webhook:file:/etc/hooks/ops``,
the first line of a file) when one of its runs ends ``failed``, ``timed_out`` or
``abandoned``; ``on_success`` when one succeeds. The URL is a secret (Slack and
Teams webhooks carry their token): the record and the pages keep the variable's
or file's name only, never the URL.

Exactly once: each service pass writes a row per (run, event, channel) before
it sends (a unique constraint: a second service, or this one after a restart,
finds it there), then posts in a thread of its own with a few retries and
backoff, and records ``sent`` or ``failed`` with the error. A channel that is
down never blocks the service or a run. The message (schema version 1)::

    {"schema": "airflowless.notification/1", "event": "failure", "deployment": "nightly",
     "run_id": 41, "pipeline": "taxi", "status": "failed", "error": "...", "trigger": "schedule",
     "interval_start": "...", "interval_end": "...", "created_at": "...", "finished_at": "..."}

Slack's and Teams' incoming webhooks show the ``text`` field, which holds one line.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["EVENTS", "parse_notify", "resolve_url", "message", "Notifier"]

log = logging.getLogger(__name__)

EVENTS = {"on_failure": ("failed", "timed_out", "abandoned"), "on_success": ("succeeded",)}
ATTEMPTS = 4
TIMEOUT_S = 10.0


def parse_notify(specs: list[str]) -> list[dict[str, str]] | None:
    """``["on_failure=webhook:env:OPS_HOOK"]`` as a deployment's ``notify``; ConfigError saying what is expected.

    >>> parse_notify(["on_failure=webhook:env:OPS_HOOK"])
    [{'on': 'on_failure', 'channel': 'webhook', 'secret': 'env:OPS_HOOK'}]
    """
    found: list[dict[str, str]] = []
    for spec in specs:
        event, _, target = spec.partition("=")
        channel, _, secret = target.partition(":")
        if event not in EVENTS:
            raise ConfigError(f"--notify takes EVENT=CHANNEL with EVENT one of {sorted(EVENTS)}; got {spec!r}")
        if channel != "webhook":
            raise ConfigError(f"unknown notification channel {channel!r} in {spec!r}; the channel is "
                              "webhook:env:VARIABLE or webhook:file:PATH (email is not built yet)")
        kind, _, name = secret.partition(":")
        if kind not in ("env", "file") or not name:
            raise ConfigError(f"a webhook's URL is a secret: name the environment variable or file that holds it, "
                              f"webhook:env:VARIABLE or webhook:file:PATH; got {spec!r}")
        if kind == "env" and os.environ.get(name):
            _check_url(os.environ[name], name)
        found.append({"on": event, "channel": channel, "secret": secret})
    return found or None


def resolve_url(secret: str) -> str:
    """The URL behind ``env:VAR`` or ``file:PATH``, in this process; ConfigError naming what is missing."""
    kind, _, name = secret.partition(":")
    if kind == "env":
        url = os.environ.get(name, "")
        if not url:
            raise ConfigError(f"the environment variable {name} (a webhook's URL) is not set where the service runs")
    else:
        try:
            url = Path(name).read_text().strip().splitlines()[0]
        except (OSError, IndexError):
            raise ConfigError(f"cannot read a webhook's URL from {name}") from None
    _check_url(url, name)
    return url


def _check_url(url: str, where: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the webhook URL in {where} is not http(s): it starts {url[:8]!r}")


def message(run: Any, deployment: str, event: str) -> dict[str, Any]:
    def iso(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    text = (f"airflowless: run {run.id} of {deployment} ({run.pipeline}) {run.status}"
            + (f": {str(run.error).splitlines()[0][:300]}" if run.error else ""))
    return {"schema": "airflowless.notification/1", "event": event.removeprefix("on_"), "deployment": deployment,
            "run_id": run.id, "pipeline": run.pipeline, "status": run.status, "error": run.error,
            "trigger": run.trigger, "interval_start": iso(run.interval_start), "interval_end": iso(run.interval_end),
            "created_at": iso(run.created_at), "finished_at": iso(run.finished_at), "text": text}


class Notifier:
    """Sends what the record says is to be sent, in threads of its own (the service's tick only starts them)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="airflowless-notify")

    def tick(self) -> int:
        """Claim the notifications due now and start sending them; how many."""
        due = self.store.claim_notifications()
        for row in due:
            self.pool.submit(self._send, row)
        return len(due)

    def _send(self, row: dict[str, Any]) -> None:
        error = None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                url = resolve_url(row["secret"])
                body = json.dumps(row["message"]).encode()
                request = urllib.request.Request(url, data=body, method="POST",
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 (http(s) only)
                    answer.read()
                self.store.finish_notification(row["id"], sent=True, attempts=attempt)
                return
            except ConfigError as exc:  # no URL here: retrying does not help
                error = str(exc)
                break
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
        log.warning("notification %s of run %s not sent: %s", row["channel"], row["run_id"], error)
        self.store.finish_notification(row["id"], sent=False, attempts=attempt, error=error)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=False)
