"""W5 limit: the same model in a bare uvicorn + Starlette app, one process, one request at a time.

Each request does the work PredictorDeployment does for one row and nothing
else: read the JSON body, take the 6 features in the checkpoint's order as a
numpy row, ``model.predict`` (the deployment answers ``predict``'s labels,
not probabilities), answer ``{"predictions": [...]}``. No pandas per request:
a DataFrame costs ~3 ms of CPU per call on this machine, which would make the
limit measure pandas rather than the HTTP stack (earlier runs of this case did
exactly that: 280 req/s). scikit-learn's warning that a numpy row has no
feature names is silenced once at import (the model was fitted on a
DataFrame); the columns are passed in the fitted order. Its stack is the
proxy's: uvloop + httptools when they are installed, else asyncio + h11
(``W5_BARE_STACK=asyncio/h11`` names one).
"""

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from w5_common import FEATURES, ROW, make_checkpoint, run_load  # noqa: E402

APP = """
import pickle, sys, warnings
import numpy as np
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
import uvicorn
warnings.filterwarnings("ignore", message="X does not have valid feature names")
model = pickle.load(open(sys.argv[1] + "/model.pkl", "rb"))
FEATURES = {features!r}
async def predict(request):
    body = await request.json()
    rows = body if isinstance(body, list) else [body]
    x = np.array([[row[f] for f in FEATURES] for row in rows], dtype=np.float64)
    return JSONResponse({{"predictions": model.predict(x).tolist()}})
uvicorn.run(Starlette(routes=[Route("/predict", predict, methods=["POST"])]), host="127.0.0.1",
            port=int(sys.argv[2]), log_level="warning", access_log=False, loop=sys.argv[3], http=sys.argv[4])
"""

URL = None
PROC = None
_FAST = all(importlib.util.find_spec(m) is not None for m in ("uvloop", "httptools"))
LOOP, HTTP = os.environ.get("W5_BARE_STACK", "uvloop/httptools" if _FAST else "asyncio/h11").split("/")


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
