"""The trips of each hour, summarised: a pipeline meant to run on a schedule.

Deploy it (the service runs it each hour, for the hour that just ended)::

    airflowless deploy pipelines/hourly_trips.py --name hourly-trips --cron "5 * * * *" --tz Europe/Berlin
    airflowless backfill hourly-trips --from 2026-11-01T00:00 --to 2026-11-02T00:00 --max-active-runs 2

Each run gets its data interval as ``interval_start`` and ``interval_end``
(ISO 8601, UTC): it computes the same numbers however late it runs, and a
backfilled or re-run hour gives what the scheduled run gave. ``airflowless run
pipelines/hourly_trips.py -p interval_start=... -p interval_end=...`` runs one
hour by hand. The trips here are synthetic, seeded by the hour.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflowless import pipeline, stage
from airflowless.datasets import add_features, taxi_table


@stage
def trips_of(interval_start: str, interval_end: str, rows_per_hour: int) -> Any:
    """The hour's trips (a stand-in for reading the partition of the hour from a lake)."""
    start, end = dt.datetime.fromisoformat(interval_start), dt.datetime.fromisoformat(interval_end)
    if end <= start:
        raise ValueError(f"interval_end {interval_end} is not after interval_start {interval_start}")
    hours = max(1, round((end - start).total_seconds() / 3600))
    return add_features(taxi_table(rows_per_hour * hours, seed=int(start.timestamp()) // 3600))


@stage
def summarise(trips: Any, interval_start: str, interval_end: str) -> dict[str, Any]:
    import pyarrow.compute as pc

    return {"interval_start": interval_start, "interval_end": interval_end, "trips": trips.num_rows,
            "mean_fare": round(pc.mean(trips["fare_amount"]).as_py(), 3),
            "big_tip_share": round(pc.mean(trips["is_big_tip"].cast("float64")).as_py(), 4)}


@pipeline(name="hourly_trips")
def hourly_trips(interval_start: str = "2026-11-01T00:00:00+00:00", interval_end: str = "2026-11-01T01:00:00+00:00",
                 rows_per_hour: int = 5_000):
    return summarise(trips_of(interval_start, interval_end, rows_per_hour), interval_start, interval_end)
