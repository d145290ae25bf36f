"""Telling people how a deployment's runs go: which events, the message, sent once by the service.

A deployment's ``notify`` lists what to send on which event (``--notify
EVENT=CHANNEL``, channels in :mod:`.channels`):

- ``on_failure``: a run ended ``failed``, ``timed_out`` or ``abandoned`` (its
  driver died), and, when the deployment has a ``--deadline``, a run still not
  ended that long after it was due (a late run fails to be on time);
- ``on_success``: a run succeeded;
- ``on_retry``: a stage of a run started a second attempt (once per run);
- ``on_late``: a run past its deadline, and a deployment with ``--expect-every``
  that started no run for longer (its data is late; an alert per silence, about
  the deployment: ``deployment_alerts`` in the record); on_failure channels hear
  of both too.

A run is due at its data interval's end (a scheduled or backfilled run), else
when it was queued. Exactly once: each service pass writes a row per (run,
event, channel) before it sends (:meth:`Store.claim_notifications`; a unique
constraint: a second service, or this one after a restart, finds it there),
then sends it from a thread of its own, retried with backoff, and records
``sent`` or ``failed`` with the error. A channel that is down never blocks the
service or a run. The message (schema version 1)::

    {"schema": "airflowless.notification/1", "event": "failure", "deployment": "nightly",
     "run_id": 41, "pipeline": "taxi", "status": "failed", "error": "...", "trigger": "schedule",
     "trigger_detail": null, "interval_start": "...", "interval_end": "...", "created_at": "...",
     "started_at": "...", "finished_at": "...", "text": "airflowless: run 41 of nightly (taxi) failed: ..."}

with ``due_at`` and ``deadline_s`` added for ``late``, and ``stage`` and ``stage_error`` for ``retry`` and
for a failure with a failed stage.
Slack's and Teams' incoming webhooks show the ``text`` field, which holds one line.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .channels import deliver, label, parse_channel

if TYPE_CHECKING:
    from ..store import Store
    from ..store.records import RunRecord

__all__ = ["EVENTS", "parse_notify", "parse_deadline", "due_events", "message", "Notifier"]

log = logging.getLogger(__name__)

EVENTS = {"on_failure": ("failed", "timed_out", "abandoned"), "on_success": ("succeeded",), "on_retry": (),
          "on_late": ()}
"""Each event and the run states that raise it (retries and lateness are found otherwise)."""

ATTEMPTS = 4
LOOK_S = 1.0  # how often the service looks for notifications due


def parse_notify(specs: list[str | tuple[str, Callable[..., Any]]]) -> list[dict[str, str]] | None:
    """``["on_failure=webhook:env:OPS_HOOK", ("on_late", alert_ops)]`` as a deployment's ``notify``;
    ConfigError saying what is expected. A function stands for ``python:`` and its name.

    >>> parse_notify(["on_failure=webhook:env:OPS_HOOK", "on_retry=email:ml@example.com"])
    [{'on': 'on_failure', 'channel': 'webhook', 'secret': 'env:OPS_HOOK'}, {'on': 'on_retry', 'channel': 'email', 'to': 'ml@example.com'}]
    """
    found: list[dict[str, str]] = []
    for spec in specs:
        if isinstance(spec, tuple):
            event, fn = spec
            text, target = f"{event}=python:{getattr(fn, '__name__', fn)}", f"python:{getattr(fn, '__name__', '')}"
        else:
            text = spec
            event, _, target = spec.partition("=")
        if event not in EVENTS:
            raise ConfigError(f"--notify takes EVENT=CHANNEL with EVENT one of {sorted(EVENTS)}; got {text!r}")
        found.append({"on": event, **parse_channel(target, text)})
    return found or None


def parse_deadline(text: str | float | None, *, option: str = "--deadline") -> float | None:
    """``"30m"``, ``"2h"``, ``"1d"``, ``"90s"`` or a number of seconds, as seconds.

    >>> parse_deadline("30m"), parse_deadline(90), parse_deadline(None)
    (1800.0, 90.0, None)
    """
    if text is None:
        return None
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(text))
        if not found:
            raise ConfigError(f"{option} is a duration such as 90s, 30m, 2h or 1d; got {text!r}")
        seconds = float(found.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[found.group(2)]
    if not seconds > 0:
        raise ConfigError(f"{option} is more than 0 seconds, got {text!r}")
    return seconds


def due_at(run: RunRecord) -> datetime:
    """When run ``run`` was due: its data interval's end, else when it was queued."""
    return run.interval_end or run.created_at


def due_events(runs: list[RunRecord], rules: list[dict[str, str]], *, deadline_s: float | None,
               retried: dict[int, tuple[str, str | None]], now: datetime
               ) -> list[tuple[RunRecord, str, dict[str, str], str, dict[str, Any]]]:
    """What ``rules`` say is to be sent about ``runs`` now: (run, event, rule, channel, extra fields)."""
    found: list[tuple[RunRecord, str, dict[str, str], str, dict[str, Any]]] = []
    for run in runs:
        events: list[tuple[str, dict[str, Any]]] = [
            (event, {}) for event, states in EVENTS.items() if run.status in states]
        if run.id in retried:
            stage, error = retried[run.id]
            events.append(("on_retry", {"stage": stage, "stage_error": error}))
        if deadline_s is not None and run.finished_at is None and run.status in ("queued", "running") \
                and now >= due_at(run) + timedelta(seconds=deadline_s):
            events.append(("on_late", {"due_at": due_at(run).isoformat(), "deadline_s": deadline_s}))
        for event, extra in events:
            for rule in rules:
                if rule["on"] == event or (event == "on_late" and rule["on"] == "on_failure"):
                    found.append((run, event, rule, label(rule), extra))
    return found


def message(run: Any, deployment: str, event: str, **extra: Any) -> dict[str, Any]:
    """The message about ``run`` for ``event`` (schema ``airflowless.notification/1``)."""
    def iso(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    what = {"on_late": f"is late: not ended {extra.get('deadline_s', 0):g} s after it was due "
                       f"({extra.get('due_at')}); it is {run.status}",
            "on_retry": f"is retrying stage {extra.get('stage')}"}.get(event, str(run.status))
    if event == "on_late":
        error = None
    elif extra.get("stage_error"):
        error = extra["stage_error"] if event == "on_retry" else f"stage {extra['stage']}: {extra['stage_error']}"
    else:
        error = run.error
    text = (f"airflowless: run {run.id} of {deployment} ({run.pipeline}) {what}"
            + (f": {str(error).splitlines()[0][:300]}" if error else ""))
    return {"schema": "airflowless.notification/1", "event": event.removeprefix("on_"), "deployment": deployment,
            "run_id": run.id, "pipeline": run.pipeline, "status": run.status, "error": run.error,
            "trigger": run.trigger, "trigger_detail": getattr(run, "trigger_detail", None),
            "interval_start": iso(run.interval_start), "interval_end": iso(run.interval_end),
            "created_at": iso(run.created_at), "started_at": iso(getattr(run, "started_at", None)),
            "finished_at": iso(run.finished_at), **extra, "text": text}


def data_late_message(deployment: str, pipeline: str, since: datetime, expect_s: float) -> dict[str, Any]:
    """The message that deployment ``deployment`` started no run for longer than ``expect_s``: its data is late."""
    return {"schema": "airflowless.notification/1", "event": "late_data", "deployment": deployment, "run_id": None,
            "pipeline": pipeline, "last_run_at": since.isoformat(), "expect_every_s": expect_s,
            "text": f"airflowless: deployment {deployment} ({pipeline}) started no run for more than {expect_s:g} s "
                    f"(since {since.isoformat(timespec='seconds')}): its data is late"}


class Notifier:
    """Sends what the record says is to be sent, in threads of its own (the service's tick only starts them)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="airflowless-notify")
        self._looked = 0.0

    def tick(self, *, force: bool = False) -> int:
        """Claim the notifications due now (at most every :data:`LOOK_S`) and start sending them; how many."""
        if not force and time.monotonic() - self._looked < LOOK_S:
            return 0
        self._looked = time.monotonic()
        due = self.store.claim_notifications()
        for row in due:
            self.pool.submit(self._send, row)
        return len(due)

    def _send(self, row: dict[str, Any]) -> None:
        error = None
        attempt = 0
        for attempt in range(1, ATTEMPTS + 1):
            try:
                deliver(row["rule"], row["message"], row["target"])
                self.store.finish_notification(row["id"], sent=True, attempts=attempt, about=row.get("about", "run"))
                return
            except ConfigError as exc:  # no URL or mail server here: retrying does not help
                error = str(exc)
                break
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                if attempt < ATTEMPTS:
                    time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
        log.warning("notification %s of run %s not sent: %s", row["channel"], row["run_id"], error)
        self.store.finish_notification(row["id"], sent=False, attempts=attempt, error=error,
                                       about=row.get("about", "run"))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=False)
