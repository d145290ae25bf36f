import os
import time

import airflowless
from airflowless import data
from airflowless.datasets import add_features

PATH = os.environ["TAXI_PATH"]
state = {}


def setup():
    state["client"] = airflowless.init(quiet=True, dashboard_address=None)


def run():
    """The workload, and where its time went: the workers' tasks (read, feature step, filter: one fused task
    per file), the slowest worker's first task (its first use of pyarrow's dataset reader and pandas), the
    driver's own loop body, and the driver's waits for the next batch (tasks, transfer, unpickling, slicing)."""
    from distributed import get_task_stream

    with get_task_stream(state["client"]) as stream:
        ds = (data.read_parquet(PATH)
              .map_batches(add_features, batch_format="pyarrow")
              .filter(expr="trip_distance > 0"))  # Ray's text form
        rows, total, own, waited = 0, 0.0, 0.0, 0.0
        batches = iter(ds.iter_batches(batch_size=8192, batch_format="numpy"))
        while True:
            began = time.perf_counter()
            batch = next(batches, None)
            got = time.perf_counter()
            waited += got - began
            if batch is None:
                break
            total += float(batch["fare_amount"].sum())
            rows += len(batch["fare_amount"])
            own += time.perf_counter() - got
    computes = [(task["worker"], part["start"], part["stop"] - part["start"])
                for task in stream.data for part in task["startstops"] if part["action"] == "compute"]
    first = {}
    for worker, _start, seconds in sorted(computes, key=lambda c: c[1]):
        first.setdefault(worker, seconds)
    from airflowless.data.consume import last_execution

    return {"rows": rows, "fare_sum": total, "shared_blocks": last_execution().shared_blocks, "tasks_s": sum(c[2] for c in computes),
            "first_task_s": max(first.values(), default=0.0), "consumer_s": own, "waiting_s": waited}


def teardown():
    airflowless.shutdown()
