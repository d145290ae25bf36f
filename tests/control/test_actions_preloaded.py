"""Actions on a scheduler the user runs: a real ``dask scheduler --preload airflowless.dashboard`` and a
real ``dask worker`` process; the driver is this test's process, the request comes over HTTP."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.control.conftest import call
from tests.control.test_actions import held
from tests.support.eventually import eventually
from tests.support.processes import stop

TOKEN = "actions-test-token"


@pytest.fixture
def user_cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    dask = shutil.which("dask", path=str(Path(sys.executable).parent))
    assert dask, "the dask command is installed with distributed"
    db = f"sqlite:///{tmp_path / 'record.db'}"
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "AIRFLOWLESS_DB": db,
           "AIRFLOWLESS_TOKEN": TOKEN}
    scheduler = subprocess.Popen(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
         "--preload", "airflowless.dashboard"],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(scheduler.stderr or []), daemon=True).start()
    processes = [scheduler]
    try:
        def found() -> tuple[str, str] | None:
            assert scheduler.poll() is None, "".join(log)
            address = next((m.group(1) for line in list(log) if (m := re.search(r"Scheduler at:\s+(\S+)", line))),
                           None)
            link = next((m.group(1) for line in list(log)
                         if (m := re.search(r"airflowless: control plane at (\S+) ", line))), None)
            return (address, link) if address and link else None

        address, link = eventually(found, timeout=90, message=lambda: "".join(log))
        processes.append(subprocess.Popen(
            [dask, "worker", address, "--nworkers", "1", "--nthreads", "2", "--host", "127.0.0.1",
             "--no-dashboard"], env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=tmp_path))
        yield {"address": address, "base": link.removesuffix("/airflowless/"), "db": db}
    finally:
        for process in reversed(processes):
            stop(process)


@pytest.mark.timeout(180)
def test_a_run_on_a_user_scheduler_is_cancelled_over_http(user_cluster: dict[str, Any], tmp_path: Path) -> None:
    from distributed import Client

    from airflowless.errors import RunCancelled
    from airflowless.store import open_store

    workdir = tmp_path / "work"
    workdir.mkdir()
    store = open_store(user_cluster["db"])
    outcome: dict[str, Any] = {}
    with Client(user_cluster["address"], set_as_default=False) as client:  # pipe.run(client=...) uses it alone
        client.wait_for_workers(1, timeout=60)

        def drive() -> None:
            try:
                held.run({"workdir": str(workdir)}, client=client, store=store, cache=False)
            except BaseException as exc:  # noqa: BLE001 - the test looks at what the driver raised
                outcome["error"] = exc

        thread = threading.Thread(target=drive, daemon=True)
        thread.start()
        try:
            eventually(lambda: (workdir / "started").exists(), message="the slow stage never started")
            run_id = store.list_runs(limit=1)[0].id
            url = f"{user_cluster['base']}/airflowless/api/v1/runs/{run_id}/cancel"
            assert call(url, method="POST")[0] == 401  # actions need the token
            status, answer = call(url, method="POST", token=TOKEN)
            assert status == 200 and answer["accepted"], (answer, store.get_run(run_id).error, outcome)
            thread.join(60)
        finally:
            (workdir / "go").write_text("go")
    assert isinstance(outcome.get("error"), RunCancelled), outcome
    record = store.get_run(run_id)
    assert record.status == "cancelled"
    assert {s.node: s.status for s in record.stages} == {"slow_first": "cancelled", "then": "cancelled"}
    status, answer = call(url, method="POST", token=TOKEN)
    assert status == 409, answer
    store.close()
