import os

import airflowless
from airflowless import data
from airflowless.datasets import add_features

PATH = os.environ["TAXI_PATH"]


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def run():
    ds = (data.read_parquet(PATH)
          .map_batches(add_features, batch_format="pyarrow")
          .filter(expr=data.col("trip_distance") > 0))
    rows, total = 0, 0.0
    for batch in ds.iter_batches(batch_size=8192, batch_format="numpy"):
        total += float(batch["fare_amount"].sum())
        rows += len(batch["fare_amount"])
    return {"rows": rows, "fare_sum": total}


def teardown():
    airflowless.shutdown()
