"""The synthetic "taxi" table of the benchmark workloads (see WORKLOADS.md).

Rows look like NYC TLC yellow-trip records for June 2021. Everything is drawn
from ``numpy.random.default_rng([seed, part])``, so a ``(seed, part)`` pair is
one deterministic stream and different parts never repeat each other.

>>> from airflowless.datasets import taxi_table, add_features
>>> table = add_features(taxi_table(1_000, seed=0))
>>> table.num_rows, "is_big_tip" in table.column_names
(1000, True)
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflowless.errors import ConfigError

from ..errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FEATURE_COLUMNS",
    "LABEL_COLUMN",
    "TAXI_SCHEMA",
    "add_features",
    "make_taxi",
    "taxi_table",
    "write_taxi_part",
]

TAXI_SCHEMA: pa.Schema = pa.schema(
    [
        ("pickup_ts", pa.timestamp("us")),
        ("dropoff_ts", pa.timestamp("us")),
        ("passenger_count", pa.int8()),
        ("trip_distance", pa.float64()),
        ("fare_amount", pa.float64()),
        ("tip_amount", pa.float64()),
        ("payment_type", pa.int8()),
    ]
)
"""Columns and types of a raw taxi table, as :func:`taxi_table` makes it."""

FEATURE_COLUMNS: tuple[str, ...] = (
    "passenger_count",
    "trip_distance",
    "fare_amount",
    "trip_duration",
    "hour",
    "day_of_week",
)
"""The model inputs, available after :func:`add_features`."""

LABEL_COLUMN = "is_big_tip"
"""The binary label added by :func:`add_features`: tip above 20% of the fare."""

_DERIVED_COLUMNS = ("trip_duration", "hour", "day_of_week", LABEL_COLUMN)
_BIG_TIP_SHARE = 0.2

_US_PER_SECOND = 1_000_000
_US_PER_DAY = 86_400 * _US_PER_SECOND
_JUNE_2021_START_US = int(np.datetime64("2021-06-01T00:00:00", "us").astype(np.int64))
_JUNE_2021_SPAN_US = 30 * _US_PER_DAY
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday; Monday is 0.
_PASSENGER_P = (0.02, 0.70, 0.14, 0.05, 0.03, 0.04, 0.02)

# Bump when the generator changes, so cached directories are rebuilt.
_GENERATOR_VERSION = 1
_MARKER = "_SUCCESS"


def taxi_table(n_rows: int, *, seed: int = 0, part: int = 0) -> pa.Table:
    """Generate ``n_rows`` taxi trips with schema :data:`TAXI_SCHEMA`.

    The same ``(seed, part)`` always gives the same table; another ``part``
    gives an independent stream, which is how :func:`make_taxi` fills files.

    >>> t = taxi_table(5, seed=1, part=2)
    >>> t.schema.equals(TAXI_SCHEMA), t.num_rows
    (True, 5)
    """
    n = _check_count("n_rows", n_rows)
    rng = np.random.default_rng([_check_count("seed", seed), _check_count("part", part)])

    pickup = _JUNE_2021_START_US + rng.integers(0, _JUNE_2021_SPAN_US, size=n, dtype=np.int64)
    duration_s = np.clip(rng.lognormal(mean=6.5, sigma=0.6, size=n), 60.0, 10_800.0)
    dropoff = pickup + np.rint(duration_s * _US_PER_SECOND).astype(np.int64)

    passengers = rng.choice(len(_PASSENGER_P), size=n, p=_PASSENGER_P).astype(np.int8)
    distance = rng.lognormal(mean=0.6, sigma=0.8, size=n)
    distance[rng.random(n) < 0.01] = 0.0
    duration_min = (dropoff - pickup) / (60 * _US_PER_SECOND)
    fare = np.maximum(2.5 + 2.5 * distance + 0.5 * duration_min + rng.normal(0.0, 1.0, size=n), 2.5)

    hour = (pickup % _US_PER_DAY) // (3_600 * _US_PER_SECOND)
    weekday = (pickup // _US_PER_DAY + _EPOCH_WEEKDAY) % 7
    logit = (
        -1.3
        + 1.5 * ((hour >= 20) | (hour < 5))
        + 0.6 * np.log1p(distance)
        + 0.5 * (weekday >= 5)
        - 0.6 * (passengers >= 3)
    )
    big = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))
    small = np.where(rng.random(n) < 0.5, 0.0, fare * rng.uniform(0.0, 0.19, size=n))
    tip = np.where(big, fare * rng.uniform(0.21, 0.35, size=n), small)

    payment = rng.integers(1, 5, size=n, dtype=np.int8)

    columns = [
        pa.array(pickup.view("datetime64[us]")),
        pa.array(dropoff.view("datetime64[us]")),
        pa.array(passengers),
        pa.array(distance),
        pa.array(fare),
        pa.array(tip),
        pa.array(payment),
    ]
    return pa.Table.from_arrays(columns, schema=TAXI_SCHEMA)


def write_taxi_part(path: str | os.PathLike[str], n_rows: int, seed: int, part: int) -> str:
    """Write ``taxi_table(n_rows, seed=seed, part=part)`` to the parquet file ``path``.

    The file appears atomically (written under a hidden temporary name, then
    renamed). Returns ``path`` as a string. Meant to run as one task per file.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     os.path.basename(write_taxi_part(os.path.join(d, "part-00000.parquet"), 10, 0, 0))
    'part-00000.parquet'
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(taxi_table(n_rows, seed=seed, part=part), tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return str(target)


MapFn = Callable[..., Iterable[Any]]
"""``map``-like: ``map_fn(func, *iterables)`` returns the results in order."""


def make_taxi(
    n_rows: int,
    *,
    n_files: int = 1,
    path: str | os.PathLike[str],
    seed: int = 0,
    overwrite: bool = False,
    map_fn: MapFn = map,
) -> list[str]:
    """Write a taxi data set of ``n_rows`` rows as ``n_files`` parquet files under ``path``.

    Files are named ``part-00000.parquet``, ... and hold as even a share of the
    rows as possible; file ``i`` is ``taxi_table(rows_i, seed=seed, part=i)``.
    A ``_SUCCESS`` marker records the arguments: a later call with the same
    arguments returns the existing files without writing (unless
    ``overwrite=True``). When regenerating, other ``part-*.parquet`` files in
    the directory are removed so the directory reads as exactly this data set.

    ``map_fn`` runs :func:`write_taxi_part` over the parts, e.g. to fan out on
    Dask: ``map_fn=lambda f, *a: client.gather(client.map(f, *a, pure=False))``.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     [os.path.basename(f) for f in make_taxi(1_000, n_files=2, path=d)]
    ['part-00000.parquet', 'part-00001.parquet']
    """
    n_rows = _check_count("n_rows", n_rows)
    seed = _check_count("seed", seed)
    if isinstance(n_files, bool) or not isinstance(n_files, int) or n_files < 1:
        raise ConfigError(f"n_files must be an int >= 1, got {n_files!r}; pass n_files=1 or more")

    directory = Path(path)
    files = [directory / f"part-{i:05d}.parquet" for i in range(n_files)]
    marker = directory / _MARKER
    wanted = {"n_rows": n_rows, "n_files": n_files, "seed": seed, "version": _GENERATOR_VERSION}
    if not overwrite and _read_marker(marker) == wanted and _holds_exactly(directory, files):
        return [str(f) for f in files]

    directory.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    for stale in set(directory.glob("part-*.parquet")) - set(files):
        stale.unlink()

    base, extra = divmod(n_rows, n_files)
    rows = [base + (i < extra) for i in range(n_files)]
    written = list(
        map_fn(write_taxi_part, [str(f) for f in files], rows, [seed] * n_files, range(n_files))
    )
    if written != [str(f) for f in files]:
        raise ConfigError(
            f"map_fn returned {len(written)} results that are not the written paths in order; "
            "pass a map_fn that behaves like the builtin map"
        )

    tmp_marker = directory / f".{_MARKER}.{uuid.uuid4().hex}.tmp"
    tmp_marker.write_text(json.dumps(wanted, sort_keys=True))
    os.replace(tmp_marker, marker)
    return written


_Batch = TypeVar("_Batch", "pd.DataFrame", pa.Table, pa.RecordBatch)


def add_features(batch: _Batch) -> _Batch:
    """The feature step: add ``trip_duration``, ``hour``, ``day_of_week`` and ``is_big_tip``.

    Takes a pandas DataFrame or a pyarrow Table (or RecordBatch) with the
    :data:`TAXI_SCHEMA` columns and returns the same kind with the original
    columns followed by: ``trip_duration`` (seconds, float64), ``hour`` (int8),
    ``day_of_week`` (int8, Monday=0) and ``is_big_tip`` (bool, tip above 20% of
    the fare). Existing columns of those names are replaced. Vectorised.

    >>> t = add_features(taxi_table(3))
    >>> t.column_names[-4:]
    ['trip_duration', 'hour', 'day_of_week', 'is_big_tip']
    >>> add_features(taxi_table(3).to_pandas())["hour"].dtype
    dtype('int8')
    """
    if isinstance(batch, (pa.Table, pa.RecordBatch)):
        return _add_features_arrow(batch)

    import pandas as pd

    if isinstance(batch, pd.DataFrame):
        return _add_features_pandas(batch)
    raise UsageError(
        f"add_features expected a pandas DataFrame or a pyarrow Table/RecordBatch, "
        f"got {type(batch).__name__}; convert the batch to one of those first"
    )


def _add_features_arrow(batch: Any) -> Any:
    pickup, dropoff = batch.column("pickup_ts"), batch.column("dropoff_ts")
    duration_us = pc.cast(pc.subtract(dropoff, pickup), pa.int64())
    new = {
        "trip_duration": pc.divide(pc.cast(duration_us, pa.float64()), float(_US_PER_SECOND)),
        "hour": pc.cast(pc.hour(pickup), pa.int8()),
        "day_of_week": pc.cast(pc.day_of_week(pickup), pa.int8()),
        LABEL_COLUMN: pc.greater(
            batch.column("tip_amount"),
            pc.multiply(batch.column("fare_amount"), _BIG_TIP_SHARE),
        ),
    }
    kept = [name for name in batch.column_names if name not in new]
    return type(batch).from_arrays(
        [batch.column(name) for name in kept] + list(new.values()),
        names=kept + list(new),
    )


def _add_features_pandas(frame: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    pickup = frame["pickup_ts"]
    # Division, not .dt.total_seconds(): it is correctly rounded and so equals Arrow's.
    duration = pd.to_timedelta(frame["dropoff_ts"] - pickup) / pd.Timedelta(seconds=1)
    kept = frame.drop(columns=[c for c in _DERIVED_COLUMNS if c in frame.columns])
    return kept.assign(
        trip_duration=duration.astype("float64"),
        hour=pickup.dt.hour.astype("int8"),
        day_of_week=pickup.dt.day_of_week.astype("int8"),
        **{LABEL_COLUMN: frame["tip_amount"] > _BIG_TIP_SHARE * frame["fare_amount"]},
    )


def _check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0, got {value!r}; pass a non-negative int")
    return int(value)


def _read_marker(marker: Path) -> Any:
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def _holds_exactly(directory: Path, files: list[Path]) -> bool:
    return set(directory.glob("part-*.parquet")) == set(files)
