"""``airflowless experiments list`` and ``show``, run as real subprocesses against a private store.

The records are written with the recorder a Tuner uses (and the store API for a
Trainer's fit), so no cluster is needed; ``tests/tune`` checks that real
experiments write these same records.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflowless.store import open_store
from airflowless.tune import TuneConfig
from airflowless.tune.recording import ExperimentRecorder
from airflowless.tune.trial import Trial, TrialStatus


@pytest.fixture
def env(home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "AIRFLOWLESS_HOME": str(home), "COLUMNS": "200", "TMPDIR": str(tmp_path)}


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def _show(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


@pytest.fixture
def recorded(home: Path) -> dict[str, int]:
    """A Trainer fit (experiment 1) and a finished Tuner search of three trials (experiment 2)."""
    store = open_store()
    try:
        train_id = store.create_experiment("XGBoostTrainer_fit", kind="train", config={"num_workers": 2},
                                           storage_path=str(home / "storage" / "XGBoostTrainer_fit"))
        store.finish_experiment(train_id, "terminated")
    finally:
        store.close()

    path = str(home / "storage" / "taxi-tune")
    recorder = ExperimentRecorder("taxi-tune", path, TuneConfig(metric="valid-logloss", mode="min", num_samples=3),
                                  {})
    recorder.create()
    good = Trial("trial_00000", {"params": {"eta": 0.25}})
    better = Trial("trial_00001", {"params": {"eta": 0.35}})
    broken = Trial("trial_00002", {"params": {"eta": 0.3}})
    for trial in (good, better, broken):
        trial.status = TrialStatus.RUNNING
        recorder.trial_started(trial)
    for step in (1, 2, 3):
        recorder.result(good, {"valid-logloss": 0.6 / step, "training_iteration": step,
                               "checkpoint_uri": f"{path}/trial_00000/checkpoint_00000{step}" if step == 3 else None})
        recorder.result(better, {"valid-logloss": 0.5 / step, "training_iteration": step,
                                 "checkpoint_uri": f"{path}/trial_00001/checkpoint_00000{step}"})
    recorder.result(broken, {"valid-logloss": 0.9, "training_iteration": 1, "checkpoint_uri": None})
    broken.restarts = 1
    recorder.trial_restarted(broken)
    good.status = better.status = TrialStatus.TERMINATED
    broken.status, broken.error = TrialStatus.ERRORED, "ValueError: eta=0.3 diverged"
    for trial in (good, better, broken):
        recorder.trial_ended(trial)
    recorder.flush()
    recorder.finish({t.trial_id: t for t in (good, better, broken)})
    recorder.store.close()
    assert recorder.experiment_id is not None
    return {"train": train_id, "tune": recorder.experiment_id}


def test_help_of_the_experiments_commands(env: dict[str, str]) -> None:
    group = cli("experiments", "--help", env=env)
    assert group.returncode == 0, _show(group)
    assert "List and show experiments" in group.stdout
    assert re.search(r"^\s+list\s", group.stdout, re.M) and re.search(r"^\s+show\s", group.stdout, re.M)
    assert "experiments " in cli("--help", env=env).stdout
    show = cli("experiments", "show", "--help", env=env)
    assert "NAME_OR_ID" in show.stdout and "--db URL" in show.stdout
    assert "--limit INTEGER" in cli("experiments", "list", "--help", env=env).stdout


def test_an_empty_store_says_so(env: dict[str, str], home: Path) -> None:
    proc = cli("experiments", "list", env=env)
    assert proc.returncode == 0, _show(proc)
    assert proc.stdout.strip() == f"no experiments in the store at sqlite:///{home / 'airflowless.db'}"


def test_list_shows_the_latest_experiments_first(env: dict[str, str], recorded: dict[str, int]) -> None:
    proc = cli("experiments", "list", env=env)
    assert proc.returncode == 0, _show(proc)
    rows = re.findall(r"│ (\d+)\s+│ (\S+)\s+│ (\w+)\s+│ (\w+)\s+│ ([^│]*?)\s+│ ([^│]*?)\s+│ ([^│]*?)\s+│", proc.stdout)
    assert rows == [
        (str(recorded["tune"]), "taxi-tune", "tune", "completed_with_errors", "3 (1 errored)",
         "valid-logloss (min)", "0.1667 (trial_00001)"),
        (str(recorded["train"]), "XGBoostTrainer_fit", "train", "completed", "0", "", ""),
    ], proc.stdout
    assert re.search(r"│ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+│ [\d.]+s\s+│", proc.stdout), proc.stdout
    assert "airflowless experiments show NAME_OR_ID" in proc.stdout

    one = cli("experiments", "list", "--limit", "1", env=env)
    assert re.findall(r"│ \d+\s+│ (\S+)", one.stdout) == ["taxi-tune"]


def test_show_lists_the_trials_with_their_last_metrics_and_checkpoints(
        env: dict[str, str], recorded: dict[str, int], home: Path) -> None:
    by_name = cli("experiments", "show", "taxi-tune", env=env)
    assert by_name.returncode == 0, _show(by_name)
    out = by_name.stdout
    assert re.search(rf"experiment {recorded['tune']} taxi-tune \(tune\): completed_with_errors in [\d.]+s", out)
    # the metric being optimised first, then each config key (nested ones joined by /), nothing cut
    header = re.search(r"┃ trial\s+┃ status\s+┃ valid-logloss \(min\)\s+┃ params/eta\s+┃ iter\s+┃ restarts\s+┃", out)
    assert header, out
    trials = re.findall(r"│ (trial_\d+)\s+│ (\w+)\s+│ ([\d.]+)\s+│ ([\d.]+)\s+│ (\d+)\s+│ (\d+)\s+│ ([^│]*?)\s+│ ([^│]*?)\s+│",
                        out)
    assert trials == [
        ("trial_00000", "completed", "0.2", "0.25", "3", "0", "", "trial_00000/checkpoint_000003"),
        ("trial_00001", "completed", "0.1667", "0.35", "3", "0", "", "trial_00001/checkpoint_000003"),
        ("trial_00002", "errored", "0.9", "0.3", "1", "1", "", ""),
    ], out
    assert "trials: 3 (2 completed, 1 errored)" in out
    assert "metric: valid-logloss (min); best 0.1667 in trial_00001 (config {params: {eta: 0.35}})" in out
    assert f"storage: {home / 'storage' / 'taxi-tune'}" in out
    assert "--- trial trial_00002 ---\nValueError: eta=0.3 diverged" in out

    by_id = cli("experiments", "show", str(recorded["tune"]), env=env)
    assert by_id.returncode == 0 and by_id.stdout == out

    fit = cli("experiments", "show", "XGBoostTrainer_fit", env=env)
    assert fit.returncode == 0, _show(fit)
    assert "XGBoostTrainer_fit (train): completed" in fit.stdout and "trials: 0" in fit.stdout
    assert "metric:" not in fit.stdout


def test_errors_exit_2_without_a_traceback(env: dict[str, str], recorded: dict[str, int], home: Path) -> None:
    missing = cli("experiments", "show", "nope", env=env)
    assert missing.returncode == 2, _show(missing)
    assert missing.stderr.strip() == (f"error: no experiment 'nope' in the store at sqlite:///{home / 'airflowless.db'}; "
                                      "see `airflowless experiments list`")
    assert cli("experiments", "show", "999", env=env).returncode == 2
    for command in (["experiments", "list"], ["experiments", "show", "taxi-tune"]):
        bad_db = cli(*command, "--db", "not a url", env=env)
        assert bad_db.returncode == 2, _show(bad_db)
        assert "error: the store URL 'not a url' is not a database URL" in bad_db.stderr
        assert "Traceback" not in bad_db.stderr
    assert cli("experiments", "show", env=env).returncode == 2  # click's usage error: no NAME_OR_ID
