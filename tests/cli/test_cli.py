"""Tests for the ``airflowless`` command line, run as real subprocesses.

Each test has its own AIRFLOWLESS_HOME (the default store, storage and cluster
state live there). ``airflowless run`` starts an embedded cluster (a few
seconds), so the runs are few and each checks much.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflowless.runtime.processes import is_alive, load_state, stop_process_cluster
from airflowless.store import RunStatus, StageStatus, open_store
from tests.support.eventually import eventually

PIPELINE = '''\
from airflowless import pipeline, stage


@stage
def make(n: int) -> list:
    return list(range(n))


@stage
def total(xs: list) -> int:
    {body}


@pipeline
def demo(n: int = 3):
    return total(make(n))
'''
WORKS = "return sum(xs)"
FAILS = 'raise RuntimeError("boom in total")'

TWO_PIPELINES = '''\
from airflowless import pipeline, stage


@stage
def one() -> int:
    return 1


@pipeline
def first():
    return one()


@pipeline(name="second")
def other():
    return one()
'''


@pytest.fixture
def env(home: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of the CLI processes: the test's home, a wide terminal, a private TMPDIR."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return {**os.environ, "AIRFLOWLESS_HOME": str(home), "COLUMNS": "200", "TMPDIR": str(tmp)}


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """A pipeline module in a folder of its own (two stages, a typed int parameter)."""
    path = tmp_path / "pipelines" / "demo.py"
    path.parent.mkdir()
    path.write_text(PIPELINE.format(body=WORKS))
    return path


def cli(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _show(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


# -- help and version -------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ([], "Commands:"),
        (["run"], "--resume RUN_ID"),
        (["runs"], "List and show pipeline runs"),
        (["runs", "list"], "--pipeline TEXT"),
        (["runs", "show"], "RUN_ID"),
        (["cluster"], "Start, inspect and stop"),
        (["cluster", "up"], "--workers"),
        (["cluster", "down"], "Stop the cluster"),
        (["cluster", "status"], "Say whether the background cluster is up"),
        (["version"], "Print the versions"),
    ],
    ids=lambda v: " ".join(v) or "group" if isinstance(v, list) else None,
)
def test_help_of_every_command(env: dict[str, str], command: list[str], expected: str) -> None:
    proc = cli(*command, "--help", env=env)
    assert proc.returncode == 0, _show(proc)
    assert proc.stdout.startswith("Usage: ")
    assert expected in proc.stdout
    if command == ["run"]:
        assert all(opt in proc.stdout for opt in ("--param", "--address", "--no-cache", "--db"))
    if not command:
        assert all(name in proc.stdout for name in ("run ", "runs ", "cluster ", "version "))


def test_installed_entry_point_and_version(env: dict[str, str]) -> None:
    script = Path(sys.executable).parent / "airflowless"
    proc = subprocess.run([str(script), "version"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, _show(proc)
    assert re.fullmatch(r"airflowless \S+ \(dask \S+, distributed \S+\)\n", proc.stdout), proc.stdout
    same = cli("version", env=env)
    assert same.returncode == 0 and same.stdout == proc.stdout
    assert cli("-h", env=env).returncode == 0


# -- run: errors before anything starts ----------------------------------------------------

def test_bad_parameters_exit_2_naming_the_parameter(env: dict[str, str], demo: Path, home: Path) -> None:
    bad_type = cli("run", str(demo), "--param", "n=notanint", env=env)
    assert bad_type.returncode == 2, _show(bad_type)
    assert "error: parameter 'n' expects int, got 'notanint'" in bad_type.stderr
    assert "--param n=<int>" in bad_type.stderr

    unknown = cli("run", str(demo), "-p", "size=3", env=env)
    assert unknown.returncode == 2, _show(unknown)
    assert "error: unknown parameter 'size'; this pipeline takes ['n']" in unknown.stderr

    malformed = cli("run", str(demo), "--param", "n", env=env)
    assert malformed.returncode == 2, _show(malformed)
    assert "a parameter is set as name=value, got 'n'" in malformed.stderr

    for proc in (bad_type, unknown, malformed):
        assert "Traceback" not in proc.stderr
        assert "cluster" not in proc.stderr  # nothing was started
    assert not (home / "airflowless.db").exists()  # nor recorded


def test_a_module_that_fails_to_import_exits_2_naming_the_file(env: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import airflowless\nimport no_such_module_for_airflowless_tests\n")
    proc = cli("run", str(broken), env=env)
    assert proc.returncode == 2, _show(proc)
    assert f"importing the pipeline module {str(broken)!r} failed" in proc.stderr
    assert "ModuleNotFoundError: No module named 'no_such_module_for_airflowless_tests'" in proc.stderr

    missing = cli("run", str(tmp_path / "missing.py"), env=env)
    assert missing.returncode == 2, _show(missing)
    assert "no pipeline module at" in missing.stderr and "missing.py" in missing.stderr


def test_an_unknown_pipeline_name_exits_2_listing_the_pipelines(env: dict[str, str], tmp_path: Path) -> None:
    module = tmp_path / "two.py"
    module.write_text(TWO_PIPELINES)

    nope = cli("run", f"{module}:nope", env=env)
    assert nope.returncode == 2, _show(nope)
    assert f"{str(module)!r} has no pipeline 'nope'; it defines ['first', 'second']" in nope.stderr

    ambiguous = cli("run", str(module), env=env)
    assert ambiguous.returncode == 2, _show(ambiguous)
    assert "defines several pipelines ['first', 'second']; choose one with" in ambiguous.stderr


# -- run, fail, fix, resume; runs list / show ------------------------------------------------

def test_run_prints_the_run_table_and_the_result(env: dict[str, str], demo: Path, home: Path) -> None:
    proc = cli("run", "pipelines/demo.py", "--param", "n=4", env=env, cwd=demo.parent.parent)
    assert proc.returncode == 0, _show(proc)
    assert re.search(r"run 1 of demo: succeeded in [\d.]+s", proc.stdout), proc.stdout
    assert re.search(r"│ make\s+│ succeeded\s+│ 1\s+│", proc.stdout), proc.stdout
    assert re.search(r"│ total\s+│ succeeded\s+│ 1\s+│.*int: 6", proc.stdout), proc.stdout
    assert "params: n=4" in proc.stdout
    assert proc.stdout.rstrip().endswith("result: 6")
    assert "embedded cluster" in proc.stderr
    lines = [line.split(" ", 1)[1] for line in proc.stderr.splitlines() if re.match(r"\d\d:\d\d:\d\d (make|total): ", line)]
    said = [line.split(" (")[0].split(" in ")[0] for line in lines]  # as they happened, though stderr is a pipe
    for stage in ("make", "total"):
        assert [x for x in said if x.startswith(stage)] == [f"{stage}: started", f"{stage}: succeeded"], said

    store = open_store(f"sqlite:///{home / 'airflowless.db'}")  # the default store under AIRFLOWLESS_HOME
    try:
        run = store.get_run(1)
        assert (run.pipeline, run.params, run.status) == ("demo", {"n": 4}, RunStatus.SUCCEEDED)
        assert [(s.node, s.status) for s in run.stages] == [("make", "succeeded"), ("total", "succeeded")]
    finally:
        store.close()


def test_failed_run_then_resume_after_fixing_the_stage(env: dict[str, str], demo: Path, home: Path) -> None:
    demo.write_text(PIPELINE.format(body=FAILS))
    failed = cli("run", str(demo), "--param", "n=4", env=env)
    assert failed.returncode == 1, _show(failed)
    assert re.search(r"run 1 of demo: failed", failed.stdout), failed.stdout
    assert re.search(r"│ make\s+│ succeeded\s+│", failed.stdout), failed.stdout
    assert re.search(r"│ total\s+│ failed\s+│.*RuntimeError: boom in total", failed.stdout), failed.stdout
    assert "--- stage total failed ---\nTraceback (most recent call last):" in failed.stderr
    assert f'File "{demo}", line 11, in total' in failed.stderr
    assert f'File "{demo}", line 11, in total\n    {FAILS}\n' in failed.stderr  # the source line too
    assert "Compute Failed" not in failed.stderr  # told once, by airflowless, not again by the worker
    assert re.search(r"\d\d:\d\d:\d\d total: failed: RuntimeError: boom in total", failed.stderr), failed.stderr
    hint = re.search(r"run (\d+) failed; resume with: airflowless run (\S+) --resume (\d+)", failed.stderr)
    assert hint is not None, failed.stderr
    assert hint.group(2) == str(demo) and hint.group(1) == hint.group(3) == "1"
    failed_id = hint.group(3)

    # only the failing stage changes, so `make` keeps its cache key and is reused
    demo.write_text(PIPELINE.format(body=WORKS))
    resumed = cli("run", str(demo), "--resume", failed_id, env=env)
    assert resumed.returncode == 0, _show(resumed)
    assert "run 2 of demo: succeeded" in resumed.stdout
    assert "params: n=4" in resumed.stdout  # the parameters of the resumed run
    assert resumed.stdout.rstrip().endswith("result: 6")

    show = cli("runs", "show", "2", env=env)
    assert show.returncode == 0, _show(show)
    assert re.search(r"│ make\s+│ cached\s+│ 0\s+│.*\(from run 1\) list: \[0, 1, 2, 3\]", show.stdout), show.stdout
    assert re.search(r"│ total\s+│ succeeded\s+│ 1\s+│.*int: 6", show.stdout), show.stdout
    assert "Traceback" not in show.stdout

    show_failed = cli("runs", "show", "1", env=env)
    assert show_failed.returncode == 0, _show(show_failed)
    assert "run 1 of demo: failed" in show_failed.stdout
    assert "--- stage total ---\nTraceback (most recent call last):" in show_failed.stdout
    assert "RuntimeError: boom in total" in show_failed.stdout

    logs = cli("runs", "logs", "1", "total", env=env)  # the failed attempt's log ends with its traceback
    assert logs.returncode == 0, _show(logs)
    assert logs.stdout.startswith("== total, attempt 1 ==\n") and "RuntimeError: boom in total" in logs.stdout
    every = cli("runs", "logs", "1", env=env)
    assert "== make, attempt 1 ==" in every.stdout and "== total, attempt 1 ==" in every.stdout, _show(every)
    assert cli("runs", "logs", "1", "nope", env=env).returncode == 2

    store = open_store()  # AIRFLOWLESS_HOME is the test's home here too
    try:
        run = store.get_run(2)
        assert (run.resumed_from, run.status) == (1, RunStatus.SUCCEEDED)
        assert (run.stage("make").status, run.stage("make").reused_from_run) == (StageStatus.CACHED, 1)
        assert run.stage("make").output_uri == store.get_run(1).stage("make").output_uri
        assert store.get_run(1).status == RunStatus.FAILED
    finally:
        store.close()

    listed = cli("runs", "list", env=env)
    assert listed.returncode == 0, _show(listed)
    rows = re.findall(r"│ (\d+)\s+│ demo\s+│ (\w+)\s+│", listed.stdout)
    assert rows == [("2", "succeeded"), ("1", "failed")], listed.stdout  # newest first
    assert "n=4" in listed.stdout
    assert re.findall(r"│ (\d+)\s+│ demo", cli("runs", "list", "--limit", "1", env=env).stdout) == ["2"]
    other = cli("runs", "list", "--pipeline", "other", env=env).stdout
    assert other.strip() == "no runs of pipeline 'other' recorded yet; start one with `airflowless run pipelines/FILE.py`"


def test_runs_errors_exit_2(env: dict[str, str], demo: Path, home: Path) -> None:
    empty = cli("runs", "list", env=env)
    assert empty.returncode == 0 and empty.stdout.startswith("no runs recorded yet"), _show(empty)
    missing = cli("runs", "show", "999", env=env)
    assert missing.returncode == 2, _show(missing)
    assert f"error: no run with id 999 in the store at sqlite:///{home / 'airflowless.db'}" in missing.stderr

    resume_missing = cli("run", str(demo), "--resume", "999", env=env)
    assert resume_missing.returncode == 2, _show(resume_missing)
    assert "no run with id 999" in resume_missing.stderr
    assert "Traceback" not in resume_missing.stderr and "cluster" not in resume_missing.stderr

    for command in (["runs", "list"], ["runs", "show", "1"], ["run", str(demo)]):
        bad_db = cli(*command, "--db", "not a url", env=env)
        assert bad_db.returncode == 2, _show(bad_db)
        assert "error: the store URL 'not a url' is not a database URL" in bad_db.stderr
        assert "Traceback" not in bad_db.stderr

    assert cli("runs", "show", "notanumber", env=env).returncode == 2  # click's usage error


# -- a background cluster ----------------------------------------------------------------------

def test_cluster_up_status_run_down(env: dict[str, str], demo: Path, home: Path, tmp_path: Path) -> None:
    state_path = home / "cluster.json"
    assert cli("cluster", "status", env=env).returncode == 1
    up = cli("cluster", "up", "--workers", "2", env=env)
    try:
        assert up.returncode == 0, _show(up)
        found = re.search(r"^scheduler\s+(tcp://127\.0\.0\.1:\d+)$", up.stdout, re.M)
        assert found is not None, up.stdout
        address = found.group(1)
        assert f"export AIRFLOWLESS_ADDRESS={address}" in up.stdout
        pages = re.search(r"^pages\s+http://127\.0\.0\.1:(\d+)/airflowless/\s+\(actions need the token in (\S+)\)$",
                          up.stdout, re.M)
        assert pages is not None, up.stdout
        token_file = Path(pages.group(2))
        assert token_file == home / "tokens" / f"{socket.gethostname()}-{pages.group(1)}" and token_file.exists()
        state = load_state(state_path)
        assert state is not None and state.address == address and len(state.worker_pids) == 2
        pids = [state.scheduler_pid, *state.worker_pids]
        assert all(is_alive(pid) for pid in pids)
        assert Path(state.log_dir).is_relative_to(tmp_path)  # under our TMPDIR

        status = cli("cluster", "status", env=env)
        assert status.returncode == 0, _show(status)
        assert status.stdout.startswith(f"up at {address}, 2/2 workers alive, dashboard http://127.0.0.1:")

        again = cli("cluster", "up", env=env)
        assert again.returncode == 1 and f"a cluster is already up at {address}" in again.stderr

        db = f"sqlite:///{tmp_path / 'runs.db'}"
        first = cli("run", str(demo), "--param", "n=5", "--address", address, "--db", db, env=env)
        assert first.returncode == 0, _show(first)
        assert f"cluster at {address}, 2 workers" in first.stderr
        assert "embedded cluster" not in first.stderr
        assert first.stdout.rstrip().endswith("result: 10")
        cached = cli("run", str(demo), "--param", "n=5", "--address", address, "--db", db, env=env)
        assert cached.returncode == 0, _show(cached)
        assert re.search(r"│ total\s+│ cached\s+│", cached.stdout), cached.stdout
        assert cached.stdout.rstrip().endswith("result: 10")  # read back from storage
        rerun = cli("run", str(demo), "-p", "n=5", "--no-cache", "--address", address, "--db", db, env=env)
        assert rerun.returncode == 0, _show(rerun)
        assert len(re.findall(r"│ (make|total)\s+│ succeeded\s+│", rerun.stdout)) == 2, rerun.stdout

        store = open_store(db)
        try:
            assert [r.address for r in store.list_runs()] == [address] * 3
            assert [r.status for r in store.list_runs()] == [RunStatus.SUCCEEDED] * 3
        finally:
            store.close()
        # a stage that fails on this cluster names its file and line: the scheduler (another process) pickles
        # each task again for its worker, keeping the file name as the driver does
        failing = tmp_path / "failing.py"
        failing.write_text("from airflowless import pipeline, stage\n\n@stage\ndef explode(n: int) -> int:\n"
                           "    raise ValueError(f'no good: {n}')\n\n@pipeline\ndef failing(n: int = 1):\n"
                           "    return explode(n)\n")
        failed = cli("run", str(failing), "--address", address, "--db", f"sqlite:///{tmp_path / 'failed.db'}",
                     env=env)
        assert failed.returncode == 1 and f'File "{failing}", line 5, in explode' in failed.stderr, _show(failed)
        assert "<dynamic-code>" not in failed.stderr
        listed = cli("runs", "list", "--db", db, env=env)
        assert re.findall(r"│ (\d+)\s+│ demo", listed.stdout) == ["3", "2", "1"], listed.stdout
        default = open_store(f"sqlite:///{home / 'airflowless.db'}")  # the service's record (cluster up's default)
        try:
            assert default.list_runs() == []  # --db was used, not the default store

            # the service cluster up started runs a submission on the cluster, without this process
            assert state.service_pid is not None and is_alive(state.service_pid)
            pids.append(state.service_pid)
            submitted = cli("submit", str(demo), "-p", "n=6", env=env)
            assert submitted.returncode == 0, _show(submitted)
            run_id = int(submitted.stdout.strip())
            eventually(lambda: default.get_run(run_id).status == RunStatus.SUCCEEDED, timeout=60,
                       message=lambda: (Path(state.log_dir) / "service.log").read_text()[-2000:])
            assert default.get_run(run_id).address == address and default.get_run(run_id).trigger == "submit"
        finally:
            default.close()

        down = cli("cluster", "down", env=env)
        assert down.returncode == 0, _show(down)
        assert f"stopped the cluster at {address}" in down.stdout
        eventually(lambda: not any(is_alive(pid) for pid in pids), message="the cluster's processes to end")
        assert not state_path.exists()
        assert not token_file.exists()  # tokens of stopped clusters do not pile up
        assert not Path(state.log_dir).exists() and "removed its logs" in down.stdout
        assert cli("cluster", "status", env=env).returncode == 1
        gone = cli("cluster", "down", env=env)
        assert gone.returncode == 0 and "no cluster is up" in gone.stdout
    finally:
        leftover = load_state(state_path)
        if leftover is not None:
            stop_process_cluster(leftover)


def test_pipelines_show_and_json_reads(env: dict[str, str], demo: Path, home: Path) -> None:
    shown = cli("pipelines", "show", str(demo), env=env)
    assert shown.returncode == 0, _show(shown)
    assert f"pipeline demo in {demo}" in shown.stdout
    assert re.search(r"│ n\s+│ int\s+│ 3\s+│", shown.stdout), shown.stdout
    assert re.search(r"│ total\s+│ total\s+│ make\s+│", shown.stdout), shown.stdout
    described = json.loads(cli("pipelines", "show", str(demo), "--json", "-p", "n=5", env=env).stdout)
    assert described["parameters"] == [{"name": "n", "type": "int", "required": False, "default": 3}]
    assert [(s["node"], s["upstream"]) for s in described["stages"]] == [("make", []), ("total", ["make"])]
    bad = cli("pipelines", "show", str(demo), "-p", "n=x", env=env)
    assert bad.returncode == 2 and "error:" in bad.stderr and "Traceback" not in bad.stderr

    assert cli("run", str(demo), "--param", "n=4", env=env).returncode == 0
    runs = json.loads(cli("runs", "list", "--json", env=env).stdout)["runs"]
    assert [(r["id"], r["pipeline"], r["status"], r["params"]) for r in runs] == [(1, "demo", "succeeded", {"n": 4})]
    one = json.loads(cli("runs", "show", "1", "--json", env=env).stdout)
    assert [(s["node"], s["status"]) for s in one["stages"]] == [("make", "succeeded"), ("total", "succeeded")]
    assert json.loads(cli("experiments", "list", "--json", env=env).stdout) == {"experiments": []}


# -- Ctrl-C --------------------------------------------------------------------------------------

def test_ctrl_c_during_a_training_prints_only_what_the_user_needs(env: dict[str, str], tmp_path: Path) -> None:
    """A terminal's Ctrl-C (SIGINT to the whole foreground group) while XGBoost ranks train: the stages' lines and
    the one line saying how to resume; no distributed tracebacks, no C++ abort messages from exiting workers."""
    import signal

    root = Path(__file__).resolve().parents[2]
    driver = subprocess.Popen([sys.executable, "-m", "airflowless.cli", "run", str(root / "pipelines" / "taxi.py"),
                               "-p", "n_rows=200000", "-p", "num_boost_round=2000", "-p", f"path={tmp_path / 'taxi'}",
                               "--no-cache"],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert driver.stderr is not None
    seen: list[str] = []
    for line in driver.stderr:  # the progress lines come as they happen, also through a pipe
        seen.append(line)
        if re.match(r"\d\d:\d\d:\d\d fit: started", line):
            break
    time.sleep(3)  # the ranks are training now (2,000 rounds take far longer)
    os.killpg(driver.pid, signal.SIGINT)
    out, err = driver.communicate(timeout=60)
    err = "".join(seen) + err
    assert driver.returncode == 130, err
    noise = [line for line in err.splitlines() if line.strip() and not line.startswith("airflowless: ")
             and not re.match(r"\d\d:\d\d:\d\d \w+: ", line)]
    assert noise == [line for line in noise if line.startswith("run 1 cancelled by SIGINT; resume with:")] and noise, err
