"""When a deployment runs: a cron expression in a time zone, or a fixed interval.

Each tick of a schedule ends a *data interval*: the run due at tick ``T``
covers ``[previous tick, T)``, as Airflow's data intervals do, and gets both
ends as parameters when its pipeline declares ``interval_start`` or
``interval_end`` (ISO 8601 strings), so running an interval again computes the
same thing. Cron expressions are read by ``cronsim`` in the schedule's time
zone (``zoneinfo``), so ``0 3 * * *`` in Europe/Berlin is 03:00 Berlin time on
both sides of a DST change (a time the spring change skips runs at the first
minute after it, once). Fixed intervals are anchored at the Unix epoch: every
service computes the same ticks.

>>> from datetime import datetime, timezone
>>> nightly = Schedule.parse(cron="0 3 * * *", timezone="Europe/Berlin")
>>> nightly.next_after(datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)).isoformat()
'2026-11-27T02:00:00+00:00'
>>> [t.isoformat() for t in nightly.interval(datetime(2026, 11, 27, 2, 0, tzinfo=timezone.utc))]
['2026-11-26T02:00:00+00:00', '2026-11-27T02:00:00+00:00']
>>> Schedule.parse(every=90).next_after(datetime(2026, 1, 1, 0, 0, 1, tzinfo=timezone.utc)).isoformat()
'2026-01-01T00:01:30+00:00'
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import ConfigError

__all__ = ["Schedule", "INTERVAL_PARAMS", "UPSTREAM_PARAM", "parse_after"]

INTERVAL_PARAMS = ("interval_start", "interval_end")
"""The parameters a scheduled run gets when its pipeline declares them."""

UPSTREAM_PARAM = "upstream_run_id"
"""The parameter a run started by another deployment's run gets (that run's id) when its pipeline declares it."""


def parse_after(specs: list[str], passing: list[str] | None = None) -> dict[str, Any] | None:
    """``["score-days:succeeded", "features"]`` as a deployment's ``after``: the deployments, the run states.

    >>> parse_after(["score-days", "features:succeeded"])
    {'deployments': ['score-days', 'features'], 'states': ['succeeded']}
    """
    if not specs:
        return None
    names: list[str] = []
    chosen: set[tuple[str, ...]] = set()
    for spec in specs:
        name, _, states = spec.partition(":")
        if not name.strip():
            raise ConfigError(f"--after is NAME or NAME:STATE[,STATE], e.g. score-days:succeeded; got {spec!r}")
        names.append(name.strip())
        chosen.add(tuple(sorted(s.strip() for s in states.split(",") if s.strip())) or ("succeeded",))
    if len(chosen) > 1:
        raise ConfigError(f"the --after deployments share their states (a run follows when each has a new run in "
                          f"them); got {sorted(chosen)}")
    found: dict[str, Any] = {"deployments": names, "states": list(chosen.pop())}
    if passing:
        if len(names) != 1:
            raise ConfigError("--pass-param takes parameters from the one run a deployment follows; with several "
                              f"--after deployments ({names}) there is no one run to take them from")
        mapped: dict[str, str] = {}
        for spec in passing:
            name, _, upstream = spec.partition("=")
            if not name.strip():
                raise ConfigError(f"--pass-param is PARAM or PARAM=UPSTREAM_PARAM, e.g. day; got {spec!r}")
            mapped[name.strip()] = upstream.strip() or name.strip()
        found["pass"] = mapped
    return found

_UTC = timezone.utc


@dataclass(frozen=True)
class Schedule:
    """A cron expression in a time zone (``cron``, ``timezone``), or every ``every`` seconds."""

    cron: str | None = None
    timezone: str = "UTC"
    every: float | None = None

    @classmethod
    def parse(cls, *, cron: str | None = None, timezone: str | None = None, every: float | str | None = None,
              ) -> Schedule:
        """Check a schedule as a user gave it; :class:`ConfigError` saying what is expected."""
        if (cron is None) == (every is None):
            raise ConfigError("a schedule is a cron expression (--cron '0 3 * * *') or an interval in seconds "
                              "(--every 3600), one of the two")
        zone = timezone or "UTC"
        _zone(zone)
        if every is not None:
            if timezone is not None:
                raise ConfigError("--tz applies to a cron schedule; an interval (--every) counts seconds")
            try:
                seconds = float(every)
            except (TypeError, ValueError):
                raise ConfigError(f"--every is a number of seconds, got {every!r}") from None
            if not math.isfinite(seconds) or seconds < 1:
                raise ConfigError(f"--every is at least 1 second, got {every!r}")
            return cls(every=seconds)
        from cronsim import CronSim, CronSimError

        assert cron is not None
        try:
            CronSim(cron, datetime.now(_zone(zone)))
        except CronSimError as exc:
            raise ConfigError(f"invalid cron expression {cron!r}: {exc}; expected five fields, "
                              "minute hour day-of-month month day-of-week, e.g. '0 3 * * *'") from None
        return cls(cron=cron, timezone=zone)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        return cls(cron=data.get("cron"), timezone=data.get("timezone", "UTC"), every=data.get("every"))

    def to_json(self) -> dict[str, Any]:
        return {"every": self.every} if self.every is not None else {"cron": self.cron, "timezone": self.timezone}

    def describe(self) -> str:
        if self.every is not None:
            return f"every {self.every:g} s"
        return f"{self.cron} ({self.timezone})"

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment``, in UTC."""
        if self.every is not None:
            step = self.every
            return _from_epoch((math.floor(moment.timestamp() / step) + 1) * step)
        return next(self._cron(moment, reverse=False))

    def previous(self, tick: datetime) -> datetime:
        """The last tick strictly before ``tick``, in UTC."""
        if self.every is not None:
            step = self.every
            return _from_epoch((math.ceil(tick.timestamp() / step) - 1) * step)
        return next(self._cron(tick, reverse=True))

    def interval(self, tick: datetime) -> tuple[datetime, datetime]:
        """The data interval the run due at ``tick`` covers: ``[previous tick, tick)``."""
        return self.previous(tick), tick.astimezone(_UTC)

    def ticks(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """The ticks in ``(start, end]``, oldest first, in UTC."""
        tick = self.next_after(start)
        while tick <= end:
            yield tick
            tick = self.next_after(tick)

    def _cron(self, moment: datetime, *, reverse: bool) -> Iterator[datetime]:
        from cronsim import CronSim

        assert self.cron is not None
        local = moment.astimezone(_zone(self.timezone))
        for found in CronSim(self.cron, local, reverse=reverse):
            found = found.astimezone(_UTC)
            if (found > moment) if not reverse else (found < moment):
                yield found


def _zone(name: str) -> Any:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r}; expected an IANA name such as 'Europe/Berlin' or 'UTC'"
                          ) from None


def _from_epoch(seconds: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=_UTC) + timedelta(seconds=seconds)
