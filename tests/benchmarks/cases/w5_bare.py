"""W5 limit: the same model in a bare uvicorn + Starlette app (one process, pandas row -> predict).

It scores each request alone, as such an app does: its throughput is one
core divided by pandas' and scikit-learn's fixed cost per call (~3 ms of CPU
measured while other helpers kept the 2 cores at load 10-20; far less on a
quiet machine), while PredictorDeployment batches the requests that wait.
That cost, not HTTP, is why the bare app's figures swing with the machine's
load. Its stack is named, not left to uvicorn's "auto": asyncio + h11 by
default (``W5_BARE_STACK=uvloop/httptools`` for the proxy's), because on
uvloop + httptools this CPU-bound app let some connections wait for seconds
(p99 6.5-7.6 s, wrk timeouts, against 1.8-2.0 s in the same sitting): the
limit is the bare app at its best.
"""

import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from w5_common import FEATURES, ROW, make_checkpoint, run_load  # noqa: E402

APP = """
import pickle, sys
import pandas as pd
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
import uvicorn
model = pickle.load(open(sys.argv[1] + "/model.pkl", "rb"))
FEATURES = {features!r}
async def predict(request):
    body = await request.json()
    rows = body if isinstance(body, list) else [body]
    return JSONResponse({{"predictions": model.predict(pd.DataFrame.from_records(rows)[FEATURES]).tolist()}})
uvicorn.run(Starlette(routes=[Route("/predict", predict, methods=["POST"])]), host="127.0.0.1",
            port=int(sys.argv[2]), log_level="warning", access_log=False, loop=sys.argv[3], http=sys.argv[4])
"""

URL = None
PROC = None
LOOP, HTTP = os.environ.get("W5_BARE_STACK", "asyncio/h11").split("/")


def setup():
    global URL, PROC
    import httpx

    folder = make_checkpoint(tempfile.mkdtemp(prefix="w5-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    PROC = subprocess.Popen([sys.executable, "-c", APP.format(features=FEATURES), folder, str(port), LOOP, HTTP])
    URL = f"http://127.0.0.1:{port}/predict"
    for _ in range(200):
        try:
            if httpx.post(URL, json=ROW).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    for _ in range(50):
        assert httpx.post(URL, json=ROW).status_code == 200


def run():
    return {**run_load(URL, server_pids=[PROC.pid]), "loop": LOOP, "http": HTTP}


def teardown():
    PROC.terminate()
    PROC.wait(10)
