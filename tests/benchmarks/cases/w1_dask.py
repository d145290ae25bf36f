import os

from distributed import Client, LocalCluster

from airflowless.datasets import add_features

PATH = os.environ["TAXI_PATH"]
state = {}


def setup():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    state["cluster"], state["client"] = cluster, Client(cluster)


def _features(frame):
    frame = add_features(frame)
    return frame[frame["trip_distance"] > 0]


def run():
    import dask.dataframe as dd

    frame = dd.read_parquet(PATH).map_partitions(_features)
    futures = state["client"].compute(frame.to_delayed())
    rows, total = 0, 0.0
    for future in futures:
        part = future.result()
        for start in range(0, len(part), 8192):
            batch = part["fare_amount"].to_numpy()[start:start + 8192]
            total += float(batch.sum())
            rows += len(batch)
        future.release()
    return {"rows": rows, "fare_sum": total}


def teardown():
    state["client"].close()
    state["cluster"].close()
