"""`airflowless run` refuses what it can check before a cluster starts, in one line with exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflowless.store import RunStatus, open_store

PIPELINE = '''\
from airflowless import pipeline, stage


@stage
def scale(f: float, n: int) -> float:
    return f * n


@pipeline
def floats(f: float = 1.0, n: int = 2):
    return scale(f, n)
'''


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "floats.py"
    path.write_text(PIPELINE)
    return path


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "COLUMNS": "200"}
    env.pop("AIRFLOWLESS_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_parameters_are_refused_before_anything_starts(module: Path, backend_url: str, home: Path,
                                                                  value: str) -> None:
    proc = cli("run", str(module), "-p", f"f={value}", "--db", backend_url, home=home)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: parameter 'f' is ") and "no NaN or infinity" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # no traceback
    assert "cluster" not in proc.stderr and proc.stdout == ""
    store = open_store(backend_url)
    try:
        assert store.count_runs() == 0
    finally:
        store.close()


def test_resume_checks_parameters_and_the_run_before_a_cluster_starts(module: Path, backend_url: str,
                                                                      home: Path) -> None:
    store = open_store(backend_url)
    try:
        done = store.create_run("floats", module=str(module), params={"f": 1.0, "n": 2})
        store.finish_run(done, RunStatus.FAILED)
        running = store.create_run("floats", module=str(module), params={"f": 1.0, "n": 2})  # driven by us
    finally:
        store.close()
    changed = cli("run", str(module), "--resume", str(done), "-p", "n=5", "--db", backend_url, home=home)
    assert changed.returncode == 2, changed.stderr
    assert "a resumed run keeps the parameters of run" in changed.stderr and "['n']" in changed.stderr
    live = cli("run", str(module), "--resume", str(running), "--db", backend_url, home=home)
    assert live.returncode == 2, live.stderr
    assert live.stderr.startswith(f"error: cannot resume: run {running} is still running (driver pid {os.getpid()}")
    for proc in (changed, live):
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "airflowless: cluster" not in proc.stderr and "embedded" not in proc.stderr  # nothing started
