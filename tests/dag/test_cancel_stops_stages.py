"""A cancelled run's stages stop on the workers: Python code is interrupted, code blocked in C has its worker restarted.

A script of its own (its worker gets restarted, so not the session's cluster)
runs two 300 s stages side by side and cancels the run through its control
topic, as the control plane's cancel does.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.scripts import run_script

SCRIPT = '''
import json
import os
import threading
import time

import airflowless
from airflowless import pipeline, stage
from airflowless.control.actions import run_topic
from airflowless.dag.interrupt import running_stages
from airflowless.dag.runner import wait_started
from airflowless.errors import RunCancelled
from airflowless.store import open_store


@stage(cache=False)
def busy(seconds: float) -> str:  # Python code: interrupted where it is
    end = time.time() + seconds
    while time.time() < end:
        pass
    return "done"


@stage(cache=False)
def sleepy(seconds: float) -> str:  # blocked in C: no exception reaches it
    time.sleep(seconds)
    return "done"


@pipeline
def slow(seconds: float = 300.0):
    return [busy(seconds), sleepy(seconds)]


if __name__ == "__main__":
    client = airflowless.init(n_workers=2, quiet=True, dashboard_address=None)
    pids = client.run(os.getpid)
    store = open_store()
    outcome = {}

    def drive():
        try:
            slow.run(client=client, store=store)
        except RunCancelled as exc:
            outcome["cancelled"] = exc.run_id

    driver = threading.Thread(target=drive)
    driver.start()
    while not store.list_runs():
        time.sleep(0.05)
    run_id = store.list_runs()[0].id
    for node in ("busy", "sleepy"):
        wait_started(store, run_id, node, timeout=60)
    time.sleep(0.5)
    asked = time.monotonic()
    client.log_event(run_topic("slow", run_id), {"action": "cancel", "run_id": run_id})
    driver.join(timeout=90)
    took = time.monotonic() - asked
    after = client.run(os.getpid)
    stages = {s.node: (s.status, s.error) for s in open_store().get_run(run_id).stages}
    print("RESULT " + json.dumps({"cancelled": outcome.get("cancelled"), "took": took,
                                  "still_running": client.run(running_stages, run_id),
                                  "restarted": sorted(set(pids.values()) - set(after.values())),
                                  "stages": stages}))
    airflowless.shutdown()
'''


def test_cancel_interrupts_python_and_restarts_a_worker_blocked_in_c(tmp_path: Path) -> None:
    result = run_script(tmp_path, "cancel_me.py", SCRIPT)
    assert result["cancelled"] is not None
    assert result["took"] < 60, result  # not the stages' 300 s
    assert all(nodes == [] for nodes in result["still_running"].values()), result
    assert len(result["restarted"]) == 1, result  # only sleepy's worker
    assert result["stages"]["busy"] == ["cancelled", "cancelled; its code was interrupted"], result
    status, error = result["stages"]["sleepy"]
    assert status == "cancelled" and "its code was stopped by restarting its worker" in error, result
