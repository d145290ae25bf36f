"""A run's record after its driver is killed, signalled, or loses its cluster; resuming it once.

Each driver is a real `airflowless run` subprocess on a real process cluster
(a `dask scheduler` and two workers). The pipeline's middle stage writes a line
to ``started`` and then waits for a marker file (``go`` or ``go-<attempt>``),
so a test knows where the run is before it kills or signals the driver.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflowless.runtime.processes import start_process_cluster, stop_process_cluster
from airflowless.store import RunStatus, StageStatus, Store, open_store
from tests.support.eventually import eventually
from tests.support.process_cluster import process_cluster_fixture

PIPELINE = '''\
import time
from pathlib import Path

from airflowless import pipeline, stage


@stage
def make(n: int) -> int:
    return n


@stage
def hold(value: int, workdir: str) -> int:
    started = Path(workdir, "started")
    with started.open("a") as f:
        f.write("started\\n")
    attempt = len(started.read_text().splitlines())
    while not (Path(workdir, "go").exists() or Path(workdir, f"go-{attempt}").exists()):
        time.sleep(0.05)
    return value + 1


@stage
def after(value: int) -> int:
    return value * 2


@pipeline
def held(workdir: str, n: int = 1):
    return after(hold(make(n), workdir))
'''

cluster = process_cluster_fixture(n_workers=2, resources={"CPU": 1})


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """The pipeline's folder; at the end every waiting stage is let go (the cluster is shared)."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "held.py").write_text(PIPELINE)
    yield path
    (path / "go").touch()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'record.db'}"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "COLUMNS": "200"}


def _driver(workdir: Path, address: str, db_url: str, *extra: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "airflowless.cli", "run", str(workdir / "held.py"), "-p", f"workdir={workdir}",
            "--address", address, "--db", db_url, *extra]
    return subprocess.Popen(args, env=_env(workdir.parent), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], env=_env(workdir.parent),
                          capture_output=True, text=True, timeout=120)


def _holding(store: Store, workdir: Path, attempts: int = 1) -> int:
    """Wait until the ``hold`` stage of the newest run is running (its ``attempts``-th start); return the run id."""
    def ready() -> int | None:
        started = workdir / "started"
        if not started.exists() or len(started.read_text().splitlines()) < attempts:
            return None
        runs = store.list_runs(limit=1)
        if not runs:
            return None
        record = store.get_run(runs[0].id)
        # the driver has also taken ``make``'s result: a scheduler killed before that loses it
        # (the driver cannot know it succeeded), which is not what these tests are about
        seen = record.stage("make").status in (StageStatus.SUCCEEDED, StageStatus.CACHED)
        return record.id if seen and record.stage("hold").status == StageStatus.RUNNING else None

    def state() -> str:
        started = workdir / "started"
        lines = started.read_text().splitlines() if started.exists() else []
        runs = [store.get_run(r.id) for r in store.list_runs(limit=3)]
        return f"{len(lines)} start(s); runs {[(r.id, r.status, _statuses(store, r.id)) for r in runs]}"

    return eventually(ready, timeout=120, message=state)


def _ended(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _statuses(store: Store, run_id: int) -> dict[str, str]:
    return {s.node: s.status for s in store.get_run(run_id).stages}


def test_a_killed_driver_leaves_an_abandoned_run_that_resumes_once(cluster, workdir: Path, db_url: str) -> None:  # noqa: ANN001
    store = open_store(db_url)
    driver = _driver(workdir, cluster.address, db_url)
    run_id = _holding(store, workdir)
    record = store.get_run(run_id)
    assert record.status == RunStatus.RUNNING
    assert (record.driver_pid, record.driver_host) == (driver.pid, os.uname().nodename)
    assert record.driver_started is not None and record.heartbeat_at is not None

    driver.kill()  # SIGKILL: the driver records nothing
    assert _ended(driver)[0] == -signal.SIGKILL
    (workdir / "go-1").touch()  # free the worker its orphaned stage task holds (that task writes the cache)

    abandoned = store.get_run(run_id)  # the Python API
    assert abandoned.status == RunStatus.ABANDONED
    assert _statuses(store, run_id) == {"make": "succeeded", "hold": "abandoned", "after": "abandoned"}
    listed = _cli(workdir, "runs", "list", "--db", db_url)
    assert listed.returncode == 0 and f"│ {run_id}  │ held     │ abandoned" in listed.stdout, listed.stdout
    shown = _cli(workdir, "runs", "show", str(run_id), "--db", db_url)
    assert f"run {run_id} of held: abandoned" in shown.stdout, shown.stdout
    assert f"driver: pid {driver.pid}" in shown.stdout and "is gone" in shown.stdout

    # Two resumes at once: one claims the run, the other is refused with one line.
    # --no-cache: the orphaned task's output is in the shared cache; the resume must run hold again
    first = _driver(workdir, cluster.address, db_url, "--resume", str(run_id), "--no-cache")
    second = _driver(workdir, cluster.address, db_url, "--resume", str(run_id), "--no-cache")
    refused = eventually(lambda: [p for p in (first, second) if p.poll() is not None], timeout=120)
    assert len(refused) == 1
    code, _, err = _ended(refused[0])
    assert code == 2, err
    said = [line for line in err.splitlines() if not line.startswith("airflowless: cluster at")]
    assert len(said) == 1 and said[0].startswith("error: ") and "resum" in said[0], err
    winner = second if refused[0] is first else first
    resumed_id = _holding(store, workdir, attempts=2)
    assert resumed_id != run_id and store.get_run(resumed_id).resumed_from == run_id
    assert store.get_run(run_id).resumed_by == resumed_id

    # While the resume runs, a third is refused before a cluster is touched.
    third = _cli(workdir, "run", str(workdir / "held.py"), "--resume", str(run_id), "--db", db_url)
    assert third.returncode == 2 and f"run {run_id} is being resumed by run {resumed_id}" in third.stderr, third.stderr
    assert "cluster" not in third.stderr.split(";")[0]

    (workdir / "go-2").touch()
    code, out, err = _ended(winner)
    assert code == 0, err
    assert "result: 4" in out
    assert _statuses(store, resumed_id) == {"make": "cached", "hold": "succeeded", "after": "succeeded"}
    settled = store.get_run(run_id)  # the abandoned run is now recorded as such, stages too
    assert settled.status == RunStatus.ABANDONED and settled.finished_at is not None
    with store.engine.connect() as conn:
        from sqlalchemy import text

        rows = dict(conn.execute(text(f"SELECT node, status FROM stage_runs WHERE run_id = {run_id}")).all())
        stored = conn.execute(text(f"SELECT status FROM pipeline_runs WHERE id = {run_id}")).scalar()
    assert stored == "abandoned" and rows == {"make": "succeeded", "hold": "abandoned", "after": "abandoned"}
    store.close()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_driver_records_its_run_cancelled(
    cluster, workdir: Path, db_url: str, sig: signal.Signals, code: int  # noqa: ANN001
) -> None:
    store = open_store(db_url)
    driver = _driver(workdir, cluster.address, db_url)
    run_id = _holding(store, workdir)
    driver.send_signal(sig)
    returncode, _, err = _ended(driver)
    (workdir / "go-1").touch()
    assert returncode == code, err
    assert "Traceback" not in err
    assert f"run {run_id} cancelled by {sig.name}; resume with: airflowless run" in err
    record = store.get_run(run_id)
    assert record.status == RunStatus.CANCELLED and record.finished_at is not None
    assert _statuses(store, run_id) == {"make": "succeeded", "hold": "cancelled", "after": "cancelled"}
    store.close()


@pytest.mark.parametrize("hold", ["running", "written"])
def test_the_scheduler_dying_fails_the_run_and_settles_every_stage(hold: str, workdir: Path, db_url: str,
                                                                   tmp_path: Path) -> None:
    """``written``: ``hold`` wrote its output, but the scheduler died before the driver heard of it."""
    doomed = start_process_cluster(n_workers=1, resources={"CPU": 1}, log_dir=tmp_path / "logs")
    try:
        store = open_store(db_url)
        driver = _driver(workdir, doomed.address, db_url)
        run_id = _holding(store, workdir)
        if hold == "written":
            os.kill(doomed.scheduler_pid, signal.SIGSTOP)  # the worker finishes, the scheduler hears nothing
            (workdir / "go").touch()
            home = tmp_path / "home"
            eventually(lambda: [p for p in home.rglob("*.pkl") if "hold" in str(p.relative_to(home))], timeout=60,
                       message=lambda: f"no output of hold under {home}")
        os.killpg(doomed.scheduler_pid, signal.SIGKILL)
        code, _, err = _ended(driver)
    finally:
        (workdir / "go").touch()
        stop_process_cluster(doomed)
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("airflowless: cluster at")
             and not re.match(r"\d\d:\d\d:\d\d \w+: ", line)]  # the stages' progress lines
    assert lines == [f"error: the cluster at {doomed.address} went away during run {run_id}; start a cluster "
                     f"and resume with: airflowless run {workdir / 'held.py'} --resume {run_id}"], err
    record = store.get_run(run_id)
    assert record.status == RunStatus.FAILED and "went away" in (record.error or "")
    hold_status = "failed" if hold == "running" else "succeeded"
    assert _statuses(store, run_id) == {"make": "succeeded", "hold": hold_status, "after": "skipped"}
    if hold == "written":  # its output is recorded, so resuming the run reuses it
        assert store.get_run(run_id).stage("hold").output_uri
    store.close()
