import os

import airflowless
from airflowless import data
from airflowless.data import DataContext
from airflowless.data.consume import last_execution
from airflowless.datasets import add_features

PATH = os.environ["TAXI_PATH"]
BUDGET = 1 << 30


def setup():
    airflowless.init(quiet=True, dashboard_address=None)
    DataContext.get_current().memory_budget_bytes = BUDGET


def run():
    ds = (data.read_parquet(PATH).map_batches(add_features, batch_format="pyarrow")
          .filter(expr="trip_distance > 0"))  # Ray's text form
    rows, total = 0, 0.0
    for batch in ds.iter_batches(batch_size=8192, batch_format="numpy"):
        total += float(batch["fare_amount"].sum())
        rows += len(batch["fare_amount"])
    ex = last_execution()
    return {"rows": rows, "fare_sum": total, "peak_held_mb": ex.peak_held_bytes / 2**20, "budget_mb": BUDGET / 2**20}


def teardown():
    airflowless.shutdown()
