"""Tuner.restore after the driver is killed: nothing finished runs again, nothing reported is lost.

The driver runs in a subprocess with its own embedded cluster (``airflowless.init()``
in the script), started in a new session so that SIGKILL to its process group
takes the scheduler and workers down with it, as a crashed laptop would. A new
subprocess then restores the experiment from its folder and finishes it.
Every trial writes the iteration it starts from to a file, so executions can
be counted from outside.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflowless.store import open_store
from tests.support.eventually import eventually
from tests.support.resumable import DRIVER_HEAD, prepare, starts

NAME = "restore-me"
N_TRIALS, ITERATIONS, CHECKPOINT_EVERY = 8, 20, 5

DRIVER = f'''{DRIVER_HEAD}

MARKS = Path(sys.argv[2])
ITERATIONS, CHECKPOINT_EVERY, PAUSE = {ITERATIONS}, {CHECKPOINT_EVERY}, 0.1


if __name__ == "__main__":
    airflowless.init(n_workers=2, quiet=True, dashboard_address=":0")
    if sys.argv[1] == "start":
        tuner = tune.Tuner(trainable, param_space={{"x": tune.grid_search(list(range({N_TRIALS})))}},
                           tune_config=tune.TuneConfig(metric="score", mode="max"),
                           run_config=RunConfig(name="{NAME}"))
    else:
        tuner = tune.Tuner.restore(sys.argv[3])
    grid = tuner.fit()
    summary = [{{"trial": Path(r.path).name, "error": None if r.error is None else str(r.error),
                "iterations": [h["training_iteration"] for h in r.metrics_history],
                "its": [h["it"] for h in r.metrics_history], "config": r.config,
                "checkpoint": r.checkpoint.path if r.checkpoint else None}} for r in grid]
    print("SUMMARY " + json.dumps(summary))
    airflowless.shutdown()
'''


def snapshot(db: str) -> dict[str, dict[str, Any]]:
    """Per trial name: its record and its reports (step -> values), as the store has them now."""
    store = open_store(db)
    try:
        experiments = [e for e in store.list_experiments() if e["name"] == NAME]
        if not experiments:
            return {}
        return {t["name"]: {**t, "reports": {m.pop("step"): m for m in store.trial_metrics(t["id"])},
                            "checkpoints": [c["step"] for c in store.trial_checkpoints(t["id"])]}
                for t in store.list_trials(experiments[0]["id"])}
    finally:
        store.close()


def test_restore_after_the_driver_is_killed(tmp_path: Path, home: Path) -> None:
    driver, marks, env, db = prepare(tmp_path, home, DRIVER)

    first = subprocess.Popen([sys.executable, str(driver), "start", str(marks)], env=env, cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def some_done_some_part_way() -> bool:  # some trials finished, some are part-way with a checkpoint
            assert first.poll() is None, "the driver ended before it was killed:\n" + first.stdout.read().decode()
            try:
                now = snapshot(db)
            except Exception:  # the driver is creating or writing the database
                return False
            done = [n for n, t in now.items() if t["status"] == "completed"]
            part_way = [n for n, t in now.items() if t["status"] == "running" and t["checkpoints"]]
            return len(done) >= 2 and bool(part_way)

        eventually(some_done_some_part_way, timeout=120, interval=0.05,
                   message=lambda: f"the experiment did not progress: {snapshot(db)}")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its scheduler and its workers
        first.wait(timeout=30)
    before = snapshot(db)
    finished = {n for n, t in before.items() if t["status"] == "completed"}
    interrupted = {n for n, t in before.items() if t["status"] == "running" and t["checkpoints"]}
    assert len(finished) >= 2 and interrupted and len(before) < N_TRIALS + 1
    assert all(len(t["reports"]) == ITERATIONS for n, t in before.items() if n in finished)
    state_file = home / "storage" / NAME / "experiment_state.pkl"
    assert state_file.exists()

    second = subprocess.run([sys.executable, str(driver), "restore", str(marks), str(state_file.parent)],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    line = next(x for x in second.stdout.splitlines() if x.startswith("SUMMARY "))
    summary = {r["trial"]: r for r in json.loads(line.removeprefix("SUMMARY "))}

    # the final ResultGrid: every trial TERMINATED, every iteration once
    assert len(summary) == N_TRIALS
    assert sorted(r["config"]["x"] for r in summary.values()) == list(range(N_TRIALS))
    for trial, r in summary.items():
        assert r["error"] is None, (trial, r["error"])
        assert r["iterations"] == r["its"] == list(range(1, ITERATIONS + 1)), trial
        assert r["checkpoint"].endswith(f"{trial}/checkpoint_{ITERATIONS:06d}")

    # finished trials ran once; interrupted ones resumed from their latest checkpoint
    for trial in finished:
        assert starts(marks, trial) == [0], trial
    for trial in interrupted:
        assert starts(marks, trial) == [0, before[trial]["checkpoints"][-1]], trial
        assert before[trial]["checkpoints"][-1] >= CHECKPOINT_EVERY
    for trial in set(summary) - finished - interrupted:  # not started, or started without a checkpoint
        assert starts(marks, trial)[-1] == 0 and len(starts(marks, trial)) <= 2, trial

    # every report recorded before the kill is still there, unchanged; now all of them are
    after = snapshot(db)
    for trial, record in before.items():
        for step, values in record["reports"].items():
            assert after[trial]["reports"][step] == values, (trial, step)
    for trial, record in after.items():
        assert sorted(record["reports"]) == list(range(1, ITERATIONS + 1)), trial
        assert (record["status"], record["iterations"]) == ("completed", ITERATIONS), trial
        assert record["checkpoints"][-1] == ITERATIONS
    store = open_store(db)
    try:
        (experiment,) = [e for e in store.list_experiments() if e["name"] == NAME]
        assert experiment["status"] == "completed"
    finally:
        store.close()

    from airflowless import tune

    again = tune.Tuner.restore(NAME)  # by its name in the store, as `airflowless experiments list` shows it
    assert again.name == NAME and again.path == str(state_file.parent)
    assert {t.status.value for t in again._restored["controller"]["trials"].values()} == {"TERMINATED"}


def test_restore_finds_an_experiment_by_name_or_says_what_it_expected(home: Path, tmp_path: Path) -> None:
    from airflowless import tune
    from airflowless.errors import ConfigError

    with pytest.raises(ConfigError, match="no experiment at 'nope': expected its folder"):
        tune.Tuner.restore("nope")
    with pytest.raises(ConfigError, match="airflowless experiments list"):
        tune.Tuner.restore(str(tmp_path / "missing"))


def test_attach_takes_back_what_the_store_has_beyond_the_saved_state(home: Path) -> None:
    """The state file is saved every few seconds, the store after every loop turn: restore trusts the store
    for reports, the latest checkpoint, restarts, and trials that ended in between."""
    from airflowless.tune import TuneConfig
    from airflowless.tune.recording import ExperimentRecorder
    from airflowless.tune.trial import Trial, TrialStatus

    def recorder() -> ExperimentRecorder:
        return ExperimentRecorder("exp", str(home / "storage" / "exp"), TuneConfig(metric="loss", mode="min"), {})

    def trials() -> dict[str, Trial]:
        return {f"trial_0000{i}": Trial(f"trial_0000{i}", {"x": i}, TrialStatus.RUNNING) for i in range(3)}

    live = recorder()
    live.create()
    a, b, c = trials().values()
    for trial in (a, b, c):
        live.trial_started(trial)
    for it in (1, 2, 3):
        live.result(a, {"loss": 1.0 / it, "training_iteration": it, "checkpoint_uri": f"/ck/a/{it}"})
    a.status = TrialStatus.TERMINATED
    live.trial_ended(a)
    live.result(b, {"loss": 0.5, "training_iteration": 1, "checkpoint_uri": "/ck/b/1"})
    live.result(b, {"loss": 0.4, "training_iteration": 2, "checkpoint_uri": None})
    c.restarts = 1
    live.trial_restarted(c)
    live.flush()
    assert live.experiment_id is not None

    older = trials()  # what a state saved before any of that knows: three running trials, no reports
    older["trial_00001"].results = [{"loss": 0.5, "training_iteration": 1}]
    ended = recorder().attach(live.experiment_id, older)
    assert list(ended) == ["trial_00000"] and ended["trial_00000"]["status"] == "completed"
    a2, b2, c2 = older.values()
    assert [r["training_iteration"] for r in a2.results] == [1, 2, 3]
    assert (a2.checkpoint, a2.checkpoint_iteration) == ("/ck/a/3", 3)
    assert [(r["training_iteration"], r["loss"]) for r in b2.results] == [(1, 0.5), (2, 0.4)]
    assert (b2.checkpoint, b2.checkpoint_iteration) == ("/ck/b/1", 1)
    assert (c2.restarts, c2.results, c2.checkpoint) == (1, [], None)
    assert all(t.record_id is not None for t in older.values())
    store = open_store()
    try:
        assert store.find_experiment("exp")["status"] == "running"  # running again
    finally:
        store.close()
