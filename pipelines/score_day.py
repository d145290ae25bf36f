"""Score one day of taxi trips as soon as its partition lands: a pipeline driven by new data.

Deploy it on a folder of ``date=YYYY-MM-DD`` partitions (local, or ``s3://...``)::

    airflowless deploy pipelines/score_day.py --name score-days \\
        --on-new-files "/tmp/taxi-days/date=*/" --param-from-match day=date
    python pipelines/score_day.py land /tmp/taxi-days 2026-11-03     # a day lands: one run scores it

The service runs it once per new day folder, once the folder is whole (quiet
for half a second, or ``--marker _SUCCESS``), with ``day`` from the folder's
name and ``path`` the folder itself. ``airflowless run pipelines/score_day.py
-p day=2026-11-03 -p path=/tmp/taxi-days/date=2026-11-03/`` scores a day by hand.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

from airflowless import pipeline, stage
from airflowless.datasets import add_features, taxi_table


@stage
def read_day(path: str) -> Any:
    """The day's trips: every parquet file of its partition (local or any fsspec URL)."""
    import pyarrow.dataset as ds

    return add_features(ds.dataset(path.rstrip("/"), format="parquet").to_table())


@stage
def score(trips: Any, day: dt.date, min_fare: float) -> dict[str, Any]:
    """The share of big tips among the day's trips over ``min_fare`` (a stand-in for a model's scores)."""
    import pyarrow.compute as pc

    kept = trips.filter(pc.greater_equal(trips["fare_amount"], min_fare))
    big = pc.sum(kept["is_big_tip"].cast("int64")).as_py() or 0
    return {"day": day.isoformat(), "trips": kept.num_rows,
            "big_tip_share": round(big / kept.num_rows, 4) if kept.num_rows else None}


@pipeline(name="score_day")
def score_day(day: dt.date, path: str, min_fare: float = 2.5):
    return score(read_day(path), day, min_fare)


def land_day(root: str, day: str, rows: int = 5_000) -> Path:
    """Write day ``day``'s synthetic trips as ``ROOT/date=DAY/part-0.parquet`` (written aside, then renamed)."""
    import pyarrow.parquet as pq

    folder = Path(root, f"date={dt.date.fromisoformat(day).isoformat()}")
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / "part-0.parquet"
    aside = folder.parent / f".{folder.name}.part-0.parquet.tmp"  # outside the partition until whole
    pq.write_table(taxi_table(rows, seed=dt.date.fromisoformat(day).toordinal()), aside)
    aside.replace(part)
    return part


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "land":
        sys.exit("usage: python pipelines/score_day.py land ROOT YYYY-MM-DD")
    print(land_day(sys.argv[2], sys.argv[3]))
