"""Several OS processes writing to one store at once: no lost or duplicated rows.

Each writer is a real Python process (``sys.executable -c``) with its own
engine, as when several ``airflowless run`` commands share a store. The
processes first report ``ready`` (imports done, so they start together), then
wait for ``go`` on stdin; each writer, once it has created its first run, says
``began`` and waits for ``on``, sent when every writer has begun, so their writes
overlap whatever the machine's load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflowless.store import RunStatus, StageStatus, open_store
from airflowless.store.migrations import MIGRATIONS

N_PROCESSES = 3
N_RUNS = 30
N_STAGES = 5
N_UPDATES = 3  # running updates per stage, before its final one

# Creates N_RUNS runs of N_STAGES stages, updates every stage N_UPDATES times and
# then to its final values, finishes the run. Prints one JSON line with the ids.
# After its first run it prints "began" and waits for a line on stdin (every writer has begun).
_WRITER = r"""
import json, sys, time
from airflowless.store import open_store

url, tag, n_runs, n_stages, n_updates = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
print("ready", flush=True)
sys.stdin.readline()
began = time.time()
store = open_store(url)
ids = []
for i in range(n_runs):
    run_id = store.create_run(f"pipe-{tag}", module=f"{tag}.py", params={"tag": tag, "i": i})
    ids.append(run_id)
    if i == 0:  # every writer has written before any goes on: what follows overlaps
        print("began", flush=True)
        sys.stdin.readline()
    store.add_stages(run_id, [
        {"node": f"s{j}", "stage": f"s{j}", "upstream": [f"s{j - 1}"] if j else [],
         "cache_key": f"{tag}-{i}-{j}", "status": "pending"}
        for j in range(n_stages)
    ])
    for attempt in range(1, n_updates + 1):
        for j in range(n_stages):
            store.update_stage(run_id, f"s{j}", status="running", attempts=attempt, worker=tag)
    for j in range(n_stages):
        store.update_stage(run_id, f"s{j}", status="succeeded", duration_s=float(j),
                           output_uri=f"file:///{tag}/{i}/{j}.pkl", output_summary=f"{tag} {i} {j}")
    store.finish_run(run_id, "succeeded")
store.close()
print(json.dumps({"tag": tag, "ids": ids, "began": began, "ended": time.time()}), flush=True)
"""

# Opens the store at each URL read from stdin as soon as it is read, creates a
# run in it, and answers with the schema version it found.
_OPENER = r"""
import sys
from airflowless.store import open_store

tag = sys.argv[1]
print("ready", flush=True)
for line in sys.stdin:
    store = open_store(line.strip())
    store.create_run("opener", module="opener.py", params={"tag": tag})
    print(f"opened {store.version}", flush=True)
    store.close()
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return request.getfixturevalue("postgres_url")


def _start(script: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the child process did not start: {line!r}\n{err}")
    return proc


def _finish(procs: list[subprocess.Popen[str]], timeout: float = 240.0) -> list[str]:
    """Close the children's stdin, wait for them and return their output; fail if one failed."""
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"a child process did not finish within {timeout} s\n{err}")
        assert proc.returncode == 0, f"a child process failed (exit {proc.returncode}):\n{err}"
        outputs.append(out)
    return outputs


def _go(procs: list[subprocess.Popen[str]], line: str = "go") -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()


def _sa_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_concurrent_runs_from_several_processes_lose_and_duplicate_nothing(backend_url: str) -> None:
    open_store(backend_url).close()  # the schema exists; the race on a fresh one is tested below
    tags = [f"p{k}" for k in range(N_PROCESSES)]
    procs = [_start(_WRITER, backend_url, tag, str(N_RUNS), str(N_STAGES), str(N_UPDATES)) for tag in tags]
    _go(procs)
    for proc in procs:  # each has created its first run and waits for the others to have too
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "began", line
    _go(procs, "on")
    reports = [json.loads(out.strip().splitlines()[-1]) for out in _finish(procs)]

    # the writers really overlapped in time
    assert max(r["began"] for r in reports) < min(r["ended"] for r in reports), reports
    ids = {r["tag"]: r["ids"] for r in reports}
    all_ids = [i for tag in tags for i in ids[tag]]
    assert len(all_ids) == len(set(all_ids)) == N_PROCESSES * N_RUNS  # no id handed out twice

    store = open_store(backend_url)
    try:
        assert store.count_runs() == N_PROCESSES * N_RUNS
        with store.engine.connect() as conn:
            stage_rows = conn.execute(sa.text("SELECT run_id, node FROM stage_runs")).all()
        assert len(stage_rows) == N_PROCESSES * N_RUNS * N_STAGES
        assert max(Counter(stage_rows).values()) == 1
        for tag in tags:
            listed = store.list_runs(limit=1000, pipeline=f"pipe-{tag}")
            assert [r.id for r in listed] == sorted(ids[tag], reverse=True)
            for i, run_id in enumerate(ids[tag]):
                run = store.get_run(run_id)
                assert (run.pipeline, run.module, run.params) == (f"pipe-{tag}", f"{tag}.py", {"tag": tag, "i": i})
                assert run.status == RunStatus.SUCCEEDED and run.finished_at is not None
                assert [s.node for s in run.stages] == [f"s{j}" for j in range(N_STAGES)]
                for j, s in enumerate(run.stages):
                    assert (s.status, s.attempts, s.worker) == (StageStatus.SUCCEEDED, N_UPDATES, tag)
                    assert (s.cache_key, s.duration_s) == (f"{tag}-{i}-{j}", float(j))
                    assert (s.output_uri, s.output_summary) == (f"file:///{tag}/{i}/{j}.pkl", f"{tag} {i} {j}")
                    assert s.upstream == ([f"s{j - 1}"] if j else [])
    finally:
        store.close()


LATEST = MIGRATIONS[-1].version


def test_processes_opening_a_fresh_database_together_all_succeed(backend_url: str, tmp_path: Path) -> None:
    rounds = 10  # the race on a fresh SQLite file shows in about one round in five
    procs = [_start(_OPENER, f"p{k}") for k in range(N_PROCESSES)]
    try:
        for r in range(rounds):
            url = f"sqlite:///{tmp_path / f'fresh-{r}.db'}" if backend_url.startswith("sqlite") else backend_url
            _go(procs, url)  # every process opens the same fresh database now
            for proc in procs:
                assert proc.stdout is not None
                line = proc.stdout.readline()
                assert line.strip() == f"opened {LATEST}", f"round {r}: {line!r}"

            engine = sa.create_engine(_sa_url(url))
            try:
                with engine.begin() as conn:
                    versions = conn.execute(sa.text("SELECT version FROM airflowless_schema_version")).scalars().all()
                    runs = conn.execute(sa.text("SELECT count(*) FROM pipeline_runs")).scalar_one()
                    assert sorted(versions) == list(range(1, LATEST + 1)), f"round {r}: schema_version rows {versions}"
                    assert runs == N_PROCESSES
                    if engine.dialect.name == "postgresql":  # make it fresh again for the next round
                        conn.execute(sa.text(
                            "DROP TABLE deployments, checkpoints, metrics, trials, experiments, stage_runs, "
                            "pipeline_runs, airflowless_schema_version CASCADE"))
            finally:
                engine.dispose()
    finally:
        _finish(procs)  # closes their stdin, which ends them
