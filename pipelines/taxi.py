"""The taxi pipeline: the seed walkthrough's big-tip model, as stages on the cluster.

Run it with ``airflowless run pipelines/taxi.py`` (or call ``taxi()`` in a
notebook). Today it makes the synthetic taxi data and summarises it with one
Dask task per file; the Data, Train, Tune and Serve stages join as those
libraries land.
"""

from __future__ import annotations

from typing import Any

from airflowless import cluster_client, pipeline, stage
from airflowless.datasets import make_taxi


@stage(cache=False)  # cheap to re-check: make_taxi keeps a marker of what it wrote
def generate(path: str, n_rows: int, n_files: int, seed: int) -> list[str]:
    """Write the taxi table as parquet files, one Dask task per file."""
    with cluster_client() as client:
        def fan_out(fn: Any, *columns: Any) -> list[str]:
            return client.gather(client.map(fn, *columns, pure=False))

        return make_taxi(n_rows, n_files=n_files, path=path, seed=seed, map_fn=fan_out)


def _summarise_file(file: str) -> dict[str, float]:
    import pyarrow.parquet as pq

    from airflowless.datasets import add_features

    table = add_features(pq.read_table(file)).to_pandas()
    return {
        "rows": float(len(table)),
        "fare_sum": float(table["fare_amount"].sum()),
        "big_tips": float(table["is_big_tip"].sum()),
        "distance_sum": float(table["trip_distance"].sum()),
    }


@stage(retries=2, retry_delay=0.5)
def summarise(files: list[str]) -> dict[str, float]:
    """Row count, mean fare, mean distance and big-tip share, from one task per file."""
    with cluster_client() as client:
        parts = client.gather(client.map(_summarise_file, files, pure=False))
    rows = sum(p["rows"] for p in parts)
    return {
        "rows": int(rows),
        "files": len(files),
        "mean_fare": round(sum(p["fare_sum"] for p in parts) / rows, 3),
        "mean_distance": round(sum(p["distance_sum"] for p in parts) / rows, 3),
        "big_tip_share": round(sum(p["big_tips"] for p in parts) / rows, 4),
    }


@pipeline
def taxi(path: str = "data/taxi-s", n_rows: int = 200_000, n_files: int = 4, seed: int = 0):
    """Make the taxi data at ``path`` and summarise it."""
    return summarise(generate(path, n_rows, n_files, seed))
