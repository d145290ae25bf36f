import glob
import os

import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflowless.datasets import add_features

PATH = os.environ["TAXI_PATH"]


def setup():
    pass


def run():
    rows, total = 0, 0.0
    for file in sorted(glob.glob(f"{PATH}/*.parquet")):
        table = add_features(pq.read_table(file))
        table = table.filter(pc.greater(table["trip_distance"], 0))
        for batch in table.to_batches(max_chunksize=8192):
            fare = batch.column("fare_amount").to_numpy()
            total += float(fare.sum())
            rows += len(fare)
    return {"rows": rows, "fare_sum": total}
