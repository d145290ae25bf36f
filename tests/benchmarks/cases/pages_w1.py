"""W1 (taxi-M: read, feature step, filter, 8192-row batches) with the dashboard on, and with PAGES=open
the experiments page open in Chromium. PAGES_W1_PASSES passes over the data (default 5), so the
page refreshes a few times while the work runs."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import airflowless  # noqa: E402
from airflowless import data  # noqa: E402
from airflowless.datasets import add_features  # noqa: E402
from pages_common import Pages, measured  # noqa: E402

PATH = os.environ["TAXI_PATH"]
PASSES = int(os.environ.get("PAGES_W1_PASSES", "5"))
pages = None


def setup():
    global pages
    pages = Pages(airflowless.init(quiet=True, dashboard_address=":0"))
    pages.show("experiments", until="document.querySelector('#content table') !== null")


def ingest():
    rows, total = 0, 0.0
    for _ in range(PASSES):
        ds = (data.read_parquet(PATH)
              .map_batches(add_features, batch_format="pyarrow")
              .filter(expr=data.col("trip_distance") > 0))
        for batch in ds.iter_batches(batch_size=8192, batch_format="numpy"):
            total += float(batch["fare_amount"].sum())
            rows += len(batch["fare_amount"])
    return {"rows": rows, "fare_sum": total}


def run():
    figures = measured(pages, ingest)
    figures["page"] = pages.check("document.querySelector('#content table') !== null")
    return figures


def teardown():
    pages.close()
    airflowless.shutdown()
