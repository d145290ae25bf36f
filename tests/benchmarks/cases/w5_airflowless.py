"""W5 airflowless: PredictorDeployment (1 replica, defaults) of a LogisticRegression checkpoint.

The work per request is the bare case's: parse the JSON row, check it, score
the 6 features as a float64 array with ``model.predict`` (in batches of the
requests that wait, as the deployment does), answer ``{"predictions": [...]}``;
plus the hop from the proxy to the replica.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from w5_common import ROW, make_checkpoint, run_load  # noqa: E402

URL = None


def setup():
    global URL
    import httpx

    import airflowless
    from airflowless import serve
    from airflowless.train.checkpoint import Checkpoint

    airflowless.init(quiet=True, dashboard_address=":0")
    folder = make_checkpoint(tempfile.mkdtemp(prefix="w5-"))
    serve.start(http_options={"port": 0})
    serve.run(serve.PredictorDeployment.bind(Checkpoint(folder)), name="w5")
    URL = serve.http_address() + "/predict"
    for _ in range(50):
        assert httpx.post(URL, json=ROW).status_code == 200


def run():
    import psutil

    from airflowless.serve.context import current_runtime

    runtime = current_runtime()
    pids = [os.getpid(), *(child.pid for child in psutil.Process().children(recursive=True))]
    parser = "httptools" if "HttpTools" in runtime.server.config.http.__mro__[1].__name__ else "h11"
    return {**run_load(URL, server_pids=pids), "loop": type(runtime.loop).__module__.split(".")[0], "http": parser}


def teardown():
    import airflowless
    from airflowless import serve

    serve.shutdown()
    airflowless.shutdown()
