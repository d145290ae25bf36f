"""Run conditions: a deployment's runs start only when these hold, whatever triggered them.

``--only-if`` (repeatable; all must hold) takes

- ``weekdays``: the run was due Monday to Friday;
- ``days=mon,wed,...``: the run was due on one of these days;
- ``previous-succeeded``: the deployment's previous run that ran succeeded (Airflow's
  ``depends_on_past``): while that run is still queued or running, this one waits.

Conditions hold back what triggers start by themselves (schedules, backfills,
``--after``, new files); a run someone triggers by hand (``deployments
trigger``) starts regardless, so after a failed run, a manual run that
succeeds lets ``previous-succeeded`` runs go on. A run is due at its data
interval's end, else when it was queued, in the time zone of the deployment's
cron schedule (UTC without one). A run whose condition does not hold when the
service would start it ends ``skipped``, with the reason, and never gets a
driver; skipped and cancelled runs are not anyone's "previous run".

>>> conditions = parse_conditions(["weekdays", "previous-succeeded"])
>>> conditions
[{'kind': 'days', 'days': [0, 1, 2, 3, 4]}, {'kind': 'previous-succeeded'}]
>>> from datetime import datetime, timezone
>>> verdict(conditions, due=datetime(2026, 11, 28, 3, tzinfo=timezone.utc), zone="UTC", previous=None)
('skip', 'its condition weekdays does not hold: it was due on a Saturday')
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..errors import ConfigError

__all__ = ["parse_conditions", "verdict", "describe"]

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def parse_conditions(specs: list[str]) -> list[dict[str, Any]] | None:
    """``["weekdays", "days=sat,sun", "previous-succeeded"]`` as a deployment's ``conditions``."""
    found: list[dict[str, Any]] = []
    for spec in specs:
        text = spec.strip().lower()
        if text == "weekdays":
            found.append({"kind": "days", "days": [0, 1, 2, 3, 4]})
        elif text.startswith("days="):
            names = [d.strip()[:3] for d in text.removeprefix("days=").split(",") if d.strip()]
            unknown = sorted(set(names) - set(_DAYS))
            if not names or unknown:
                raise ConfigError(f"--only-if days= takes days of the week, e.g. days=mon,wed,fri; got {spec!r}")
            found.append({"kind": "days", "days": sorted({_DAYS.index(n) for n in names})})
        elif text == "previous-succeeded":
            found.append({"kind": "previous-succeeded"})
        else:
            raise ConfigError(f"unknown run condition {spec!r}; --only-if takes weekdays, days=mon,tue,... or "
                              "previous-succeeded")
    return found or None


def describe(condition: dict[str, Any]) -> str:
    if condition["kind"] == "days":
        days = condition["days"]
        return "weekdays" if days == [0, 1, 2, 3, 4] else "days=" + ",".join(_DAYS[d] for d in days)
    return str(condition["kind"])


def needs_previous(conditions: list[dict[str, Any]] | None) -> bool:
    return any(c["kind"] == "previous-succeeded" for c in conditions or [])


def verdict(conditions: list[dict[str, Any]], *, due: datetime, zone: str, previous: tuple[int, str] | None
            ) -> tuple[str, str] | None:
    """None when the run may start; ``("wait", why)`` or ``("skip", why)`` otherwise. ``previous``: the
    deployment's previous run that ran (id, status), or None if it has none."""
    from .schedules import _zone

    for condition in conditions:
        if condition["kind"] == "days":
            local = due.astimezone(_zone(zone))
            if local.weekday() not in condition["days"]:
                return "skip", (f"its condition {describe(condition)} does not hold: it was due on a "
                                f"{_NAMES[local.weekday()]}")
        elif condition["kind"] == "previous-succeeded" and previous is not None:
            run_id, status = previous
            if status in ("queued", "running"):
                return "wait", f"its condition previous-succeeded: waiting for run {run_id} to end"
            if status != "succeeded":
                return "skip", f"its condition previous-succeeded does not hold: run {run_id} {status}"
    return None
