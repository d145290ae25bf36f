"""The record's clock: every time the store writes is UTC, and every time it reads back is made aware in UTC.

>>> from datetime import datetime
>>> aware(datetime(2026, 11, 3, 4, 0)).isoformat()
'2026-11-03T04:00:00+00:00'
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["aware", "utc_now"]


def utc_now() -> datetime:
    """Now, in UTC: the time every row the store writes carries."""
    return datetime.now(timezone.utc)


def aware(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime (None stays None).

    SQLite returns naive datetimes (everything written is UTC); PostgreSQL
    returns them in the session's time zone.
    """
    if value is None:
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
