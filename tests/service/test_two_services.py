"""Two services on one PostgreSQL record, in two processes, over 200 due runs: each is queued and started once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflowless.service.schedules import Schedule
from airflowless.store import open_store

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
TICKS = 200

# One service's passes with the clock the test gives (both see the same moments, in their own order):
# queue what is due, claim what may start, and take each claimed run as its driver would.
_SERVICE = """
import json, sys
from datetime import datetime, timedelta, timezone
from airflowless.store import open_store
from airflowless.store.liveness import this_driver

url, t0, ticks = sys.argv[1], datetime.fromisoformat(sys.argv[2]), int(sys.argv[3])
store = open_store(url)
me = store.register_service(this_driver(), None)
queued, started = [], []
for second in range(ticks + 5):
    now = t0 + timedelta(seconds=second + 0.5)
    queued += store.schedule_due(now)
    for run in store.claim_runs(me, now=now):
        store.take_queued_run(run.id, module="m", params=run.params, driver=this_driver(), address=None)
        started.append(run.id)
print("RESULT " + json.dumps({"queued": queued, "started": started}))
"""


def test_two_services_queue_and_start_each_of_200_due_runs_once(postgres_url: str, tmp_path: Path) -> None:
    store = open_store(postgres_url)
    store.create_pipeline_deployment("every-second", pipeline="p", target="/x/p.py:p", params={},
                                     schedule=Schedule.parse(every=1), catchup=True, now=T0)
    script = tmp_path / "service.py"
    script.write_text(_SERVICE)
    services = [subprocess.Popen([sys.executable, str(script), postgres_url, T0.isoformat(), str(TICKS)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for process in services:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, out + err
        results.append(json.loads(out.splitlines()[-1].removeprefix("RESULT ")))

    queued = [run for result in results for run in result["queued"]]
    started = [run for result in results for run in result["started"]]
    assert len(queued) >= TICKS and Counter(queued).most_common(1)[0][1] == 1
    assert sorted(started) == sorted(queued)  # each queued run started, by one service
    runs = [store.get_run(run_id) for run_id in queued]
    ends = [run.interval_end for run in runs]
    assert len(set(ends)) == len(ends)  # no interval twice
    assert sorted(ends)[:TICKS] == [T0 + timedelta(seconds=s) for s in range(1, TICKS + 1)]  # none missed
    # taken by the drivers (the two service processes here), which have exited since
    assert {run.driver_pid for run in runs} <= {process.pid for process in services}
    assert {run.status for run in runs} == {"abandoned"}
    store.close()
