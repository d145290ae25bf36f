"""W5 during a rolling update: the W5 model served from ``models:/w5@champion``, the alias moved mid-load.

The load is W5's (wrk -t2 -c32, or the Python generator without wrk). First a steady window (W5_SECONDS, the
deployment at version 1); then the same window again, with the alias moved to version 2 three seconds in:
the deployment rolls (a new replica started and health-checked, the old one drained and stopped) while the
load runs. Figures: both windows' p50/p99/errors and how long the roll took.
"""

import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from w5_common import ROW, make_checkpoint, run_load  # noqa: E402

STATE: dict = {}


def setup():
    import httpx

    import airflowless
    from airflowless import models, serve

    airflowless.init(quiet=True, dashboard_address=":0")
    first = make_checkpoint(tempfile.mkdtemp(prefix="w5-roll-"))
    second = tempfile.mkdtemp(prefix="w5-roll-")
    shutil.copytree(first, second, dirs_exist_ok=True)
    with open(os.path.join(second, "README"), "w") as f:  # other files: another version
        f.write("version 2\n")
    models.set_alias("w5", "champion", models.register("w5", first).version)
    STATE["next"] = models.register("w5", second).version
    serve.start(http_options={"port": 0})
    serve.run(serve.PredictorDeployment.bind("models:/w5@champion"), name="w5")
    STATE["url"] = serve.http_address() + "/predict"
    for _ in range(50):
        assert httpx.post(STATE["url"], json=ROW).status_code == 200


def _move_alias_and_time_the_roll(done: dict) -> None:
    from airflowless import models
    from airflowless.serve.context import current_runtime

    time.sleep(3)
    runtime = current_runtime()
    key = ("w5", "PredictorDeployment")
    began = time.monotonic()
    models.set_alias("w5", "champion", STATE["next"])
    while runtime.core.deployments[key].version == 0 and time.monotonic() - began < 60:
        time.sleep(0.02)
    while runtime.core.deployments[key].rolling_from is not None and time.monotonic() - began < 120:
        time.sleep(0.02)
    done["roll_s"] = time.monotonic() - began
    done["version"] = runtime.core.deployments[key].version


def run():
    steady = run_load(STATE["url"])
    done: dict = {}
    mover = threading.Thread(target=_move_alias_and_time_the_roll, args=(done,))
    mover.start()
    rolling = run_load(STATE["url"])
    mover.join()
    return {"steady_p50_ms": steady["p50_ms"], "steady_p99_ms": steady["p99_ms"],
            "steady_errors": steady["errors"], "steady_requests_per_s": steady["requests_per_s"],
            "roll_p50_ms": rolling["p50_ms"], "roll_p99_ms": rolling["p99_ms"], "roll_errors": rolling["errors"],
            "roll_requests_per_s": rolling["requests_per_s"], "roll_s": done.get("roll_s", -1.0),
            "rolled_to": done.get("version", -1), "generator": steady["generator"]}


def teardown():
    import airflowless
    from airflowless import serve

    serve.shutdown()
    airflowless.shutdown()
