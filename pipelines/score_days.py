"""Score each day of taxi trips that has landed: a fan-out over a list known only at run time.

Run it with ``airflowless run pipelines/score_days.py``. ``land`` writes a few
days of synthetic trips as ``date=YYYY-MM-DD`` folders (the way data arrives
from upstream); ``list_days`` finds what is there when the run gets to it;
``score_day`` runs once per day (``score_day[0]``, ``score_day[1]``... in the
record, each cached by its day's files, so tomorrow's run scores only the new day
and a day whose files were replaced);
``summarise`` reads the list of their outputs. ``release`` runs however the
rest went (``trigger="all_done"``): it removes the run's lock file, as a
teardown task would.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflowless import Skip, pipeline, stage
from airflowless.datasets import add_features, taxi_table


@stage(cache=False)  # what has landed can change between runs
def land(root: str, days: int, rows_per_day: int, lock: str) -> str:
    """Write ``days`` days of trips under ``root`` (days already there are kept), and take the lock."""
    import pyarrow.parquet as pq

    Path(lock).parent.mkdir(parents=True, exist_ok=True)
    Path(lock).write_text(str(os.getpid()))
    first = dt.date(2026, 11, 1)
    for offset in range(days):
        folder = Path(root, f"date={first + dt.timedelta(days=offset)}")
        if not folder.exists():
            folder.mkdir(parents=True)
            pq.write_table(taxi_table(rows_per_day, seed=offset), folder / "part-0.parquet")
    return root


@stage(cache=False)  # a listing: what is there now
def list_days(root: str) -> list[str]:
    return sorted(path.name.removeprefix("date=") for path in Path(root).glob("date=*") if path.is_dir())


def _the_day(day: str, root: str, min_fare: float) -> tuple[str, float]:
    """What a day's score depends on: that day's files (not the whole root's: a new day leaves it alone)."""
    return os.path.join(root, f"date={day}"), min_fare


@stage(retries=1, cache_key=_the_day)
def score_day(day: str, root: str, min_fare: float) -> dict[str, Any]:
    """The share of big tips among the day's trips over ``min_fare`` (a stand-in for a model's scores)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = add_features(pq.read_table(Path(root, f"date={day}")))
    table = table.filter(pc.greater_equal(table["fare_amount"], min_fare))
    if table.num_rows == 0:
        raise Skip(f"no trips over {min_fare} on {day}")
    big = pc.sum(table["is_big_tip"].cast("int64")).as_py()
    return {"day": day, "trips": table.num_rows, "big_tip_share": round(big / table.num_rows, 4)}


@stage
def summarise(scores: list[dict[str, Any] | None]) -> dict[str, Any]:
    scored = [s for s in scores if s is not None]
    return {"days": len(scores), "scored": len(scored),
            "trips": sum(s["trips"] for s in scored),
            "best_day": max(scored, key=lambda s: s["big_tip_share"])["day"] if scored else None}


@stage(trigger="all_done", cache=False)
def release(lock: str, summary: dict[str, Any] | None) -> str:
    """Remove the lock, whatever happened upstream (``summary`` is None when it failed)."""
    Path(lock).unlink(missing_ok=True)
    return "released" if summary is not None else "released after a failure"


@pipeline
def score_days(root: str = "data/taxi-days", days: int = 3, rows_per_day: int = 2_000, min_fare: float = 0.0,
               lock: str = "data/taxi-days.lock"):
    landed = land(root, days, rows_per_day, lock)
    summary = summarise(score_day.map(list_days(landed), root, min_fare=min_fare))  # each keyed by its day's files
    return {"summary": summary, "lock": release(lock, summary)}
