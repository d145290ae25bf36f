"""W7: cold start — a fresh process imports, starts the embedded cluster, runs one task, shuts down.

Run: python -m pytest tests/benchmarks/test_w7_cold_start.py --benchmarks -s
Target: airflowless at most 1.1x Dask's own LocalCluster (2 worker processes x 1 thread).
"""

from __future__ import annotations

import os
import tempfile

import pytest

from .common import interleaved, report

LOCALCLUSTER = """
from distributed import Client, LocalCluster
cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":8787")
client = Client(cluster)
assert client.submit(lambda: 1 + 1).result() == 2
client.close(); cluster.close()
"""

AIRFLOWLESS = """
import airflowless
client = airflowless.init(quiet=True)
assert client.submit(lambda: 1 + 1).result() == 2
airflowless.shutdown()
"""

IMPORT_ONLY = "import distributed"


@pytest.mark.benchmark
def test_w7_cold_start() -> None:
    env = {**os.environ, "AIRFLOWLESS_HOME": tempfile.mkdtemp()}
    env.pop("AIRFLOWLESS_ADDRESS", None)
    times = interleaved({"dask LocalCluster": LOCALCLUSTER, "airflowless.init": AIRFLOWLESS,
                         "import distributed": IMPORT_ONLY}, repeats=int(os.environ.get("W7_REPEATS", "7")),
                        env=env)
    medians = report("W7 cold start (fresh processes, 2 workers x 1 thread)", times, "dask LocalCluster")
    ratio = medians["airflowless.init"] / medians["dask LocalCluster"]
    print(f"  ratio airflowless/LocalCluster = {ratio:.3f} (target <= 1.10)")
