"""Synthetic, seeded data sets for tests and benchmarks.

>>> from airflowless.datasets import taxi_table
>>> taxi_table(10).num_rows
10
"""

from airflowless.datasets.taxi import (
    FEATURE_COLUMNS,
    LABEL_COLUMN,
    TAXI_SCHEMA,
    add_features,
    make_taxi,
    taxi_table,
    write_taxi_part,
)

__all__ = [
    "FEATURE_COLUMNS",
    "LABEL_COLUMN",
    "TAXI_SCHEMA",
    "add_features",
    "make_taxi",
    "taxi_table",
    "write_taxi_part",
]
