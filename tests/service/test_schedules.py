"""Schedules: cron in a time zone across DST changes, fixed intervals anchored at the epoch, data intervals."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflowless.errors import ConfigError
from airflowless.service.schedules import Schedule

UTC = timezone.utc


def _iso(moments: list[datetime]) -> list[str]:
    return [m.isoformat() for m in moments]


def test_a_daily_cron_in_berlin_runs_at_local_time_on_both_sides_of_each_dst_change() -> None:
    nightly = Schedule.parse(cron="0 3 * * *", timezone="Europe/Berlin")
    # spring: 03:00 CET is 02:00 UTC, 03:00 CEST is 01:00 UTC
    assert _iso(list(nightly.ticks(datetime(2026, 3, 27, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC)))) == [
        "2026-03-28T02:00:00+00:00", "2026-03-29T01:00:00+00:00", "2026-03-30T01:00:00+00:00"]
    # autumn: back to 02:00 UTC
    assert _iso(list(nightly.ticks(datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, 12, tzinfo=UTC)))) == [
        "2026-10-25T02:00:00+00:00", "2026-10-26T02:00:00+00:00"]
    # the run of 29 March covers the 23 hours since the one before
    start, end = nightly.interval(datetime(2026, 3, 29, 1, tzinfo=UTC))
    assert (end - start).total_seconds() == 23 * 3600


def test_a_time_the_spring_change_skips_runs_once_just_after_it() -> None:
    at_half_past_two = Schedule.parse(cron="30 2 * * *", timezone="Europe/Berlin")
    ticks = list(at_half_past_two.ticks(datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC)))
    assert _iso(ticks) == ["2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00"]


def test_an_hourly_cron_keeps_every_hour_through_the_autumn_change() -> None:
    hourly = Schedule.parse(cron="0 * * * *", timezone="Europe/Berlin")
    ticks = list(hourly.ticks(datetime(2026, 10, 24, 23, tzinfo=UTC), datetime(2026, 10, 25, 3, tzinfo=UTC)))
    assert _iso(ticks) == ["2026-10-25T00:00:00+00:00", "2026-10-25T01:00:00+00:00", "2026-10-25T02:00:00+00:00",
                           "2026-10-25T03:00:00+00:00"]


def test_fixed_intervals_are_anchored_at_the_epoch_so_every_service_computes_the_same_ticks() -> None:
    every = Schedule.parse(every=15)
    assert every.next_after(datetime(2026, 1, 1, 0, 0, 14, tzinfo=UTC)) == datetime(2026, 1, 1, 0, 0, 15, tzinfo=UTC)
    assert every.next_after(datetime(2026, 1, 1, 0, 0, 15, tzinfo=UTC)) == datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    assert every.interval(datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)) == (
        datetime(2026, 1, 1, 0, 0, 15, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC))
    assert Schedule.from_json(every.to_json()) == every


@pytest.mark.parametrize(("given", "says"), [
    ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
    ({"cron": "0 3 * *"}, "expected five fields"),
    ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"every": 0.5}, "at least 1 second"),
    ({"every": "soon"}, "a number of seconds"),
    ({"every": 60, "timezone": "UTC"}, "--tz applies to a cron schedule"),
    ({}, "one of the two"),
    ({"cron": "0 3 * * *", "every": 60}, "one of the two"),
])
def test_a_bad_schedule_is_one_clear_error(given: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Schedule.parse(**given)  # type: ignore[arg-type]
    assert says in str(raised.value)
