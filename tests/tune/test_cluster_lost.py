"""The scheduler killed during ``Tuner.fit()``: never silent, and restore on a new cluster goes on.

A real ``dask scheduler`` and workers (background processes); the driver is a
subprocess connected to them. The scheduler gets SIGKILL while trials are part
way, with checkpoints. ``fit()`` must raise ``ClusterLostError`` (one line, with
what to do), the trials must be recorded ``interrupted``, not ``errored``, and
``Tuner.restore`` on a new cluster must resume them from their checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from airflowless.runtime.processes import start_process_cluster, stop_process_cluster
from airflowless.store import open_store
from tests.support.eventually import eventually
from tests.support.resumable import DRIVER_HEAD, prepare, starts

NAME = "lose-the-cluster"
N_TRIALS, ITERATIONS = 4, 30

DRIVER = f'''{DRIVER_HEAD}
from airflowless.errors import ClusterLostError

MARKS = Path(sys.argv[3])
ITERATIONS, CHECKPOINT_EVERY, PAUSE = {ITERATIONS}, 1, 0.15


if __name__ == "__main__":
    airflowless.init(sys.argv[2], quiet=True)
    if sys.argv[1] == "start":
        tuner = tune.Tuner(tune.with_resources(trainable, {{"CPU": 0.5}}),
                           param_space={{"x": tune.grid_search(list(range({N_TRIALS})))}},
                           tune_config=tune.TuneConfig(metric="score", mode="max"), run_config=RunConfig(name="{NAME}"))
    else:
        tuner = tune.Tuner.restore(sys.argv[4])
    try:
        grid = tuner.fit()
    except ClusterLostError as exc:
        print("LOST " + str(exc), flush=True)
        sys.exit(3)
    print("SUMMARY " + json.dumps([{{"trial": Path(r.path).name, "error": None if r.error is None else str(r.error),
                                    "its": [h["it"] for h in r.metrics_history]}} for r in grid]))
'''


def _trials(db: str) -> dict[str, dict[str, Any]]:
    store = open_store(db)
    try:
        experiments = [e for e in store.list_experiments() if e["name"] == NAME]
        if not experiments:
            return {}
        return {t["name"]: {**t, "experiment_status": experiments[0]["status"],
                            "checkpoints": len(store.trial_checkpoints(t["id"]))}
                for t in store.list_trials(experiments[0]["id"])}
    finally:
        store.close()


def test_fit_raises_when_the_scheduler_dies_and_restore_goes_on(tmp_path: Path, home: Path) -> None:
    driver, marks, env, db = prepare(tmp_path, home, DRIVER)
    first_cluster = start_process_cluster(n_workers=2, log_dir=tmp_path / "logs-1", env={"AIRFLOWLESS_HOME": str(home)})
    second_cluster = None
    try:
        first = subprocess.Popen([sys.executable, str(driver), "start", first_cluster.address, str(marks)], env=env,
                                 cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def part_way() -> bool:
            assert first.poll() is None, "the driver ended before the kill:\n" + (first.stdout.read() if first.stdout else "")
            try:
                trials = _trials(db)
            except Exception:  # being created
                return False
            return len(trials) == N_TRIALS and sum(t["checkpoints"] >= 3 for t in trials.values()) >= 2

        eventually(part_way, timeout=120, interval=0.1, message=lambda: f"no progress: {_trials(db)}")
        os.killpg(first_cluster.scheduler_pid, signal.SIGKILL)
        output, _ = first.communicate(timeout=90)
        assert first.returncode == 3, output
        lost = next(line for line in output.splitlines() if line.startswith("LOST "))
        assert f"went away during experiment {NAME!r}" in lost and "Tuner.restore(" in lost, lost
        assert "NoneType" not in output
        after = _trials(db)
        assert not [n for n, t in after.items() if t["status"] == "errored"], after
        assert {t["status"] for t in after.values()} <= {"interrupted", "completed", "pending"}, after
        assert next(iter(after.values()))["experiment_status"] == "interrupted"
        path = lost.split("Tuner.restore(")[1].split(")")[0].strip("'\"")

        stop_process_cluster(first_cluster)
        second_cluster = start_process_cluster(n_workers=2, log_dir=tmp_path / "logs-2",
                                               env={"AIRFLOWLESS_HOME": str(home)})
        second = subprocess.run([sys.executable, str(driver), "restore", second_cluster.address, str(marks), path],
                                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stdout + second.stderr
        summary = json.loads(next(line for line in second.stdout.splitlines() if line.startswith("SUMMARY "))[8:])
        assert len(summary) == N_TRIALS and all(r["error"] is None for r in summary), summary
        assert all(r["its"][-1] == ITERATIONS for r in summary), summary
        resumed = [name for name, t in after.items() if t["status"] == "interrupted" and t["checkpoints"]]
        assert resumed, after
        for name in resumed:  # continued from a checkpoint, not from the start
            runs = starts(marks, name)
            assert len(runs) == 2 and runs[1] > 0, (name, runs)
        assert {t["status"] for t in _trials(db).values()} == {"completed"}
    finally:
        for cluster in (first_cluster, second_cluster):
            if cluster is not None:
                stop_process_cluster(cluster)


PIPELINE = f'''{DRIVER_HEAD}
import os

from airflowless import pipeline, stage

MARKS = Path(os.environ["MARKS"])
ITERATIONS, CHECKPOINT_EVERY, PAUSE = 20, 1, 0.15


@stage
def search(n: int) -> list:
    grid = tune.Tuner(tune.with_resources(trainable, {{"CPU": 0.5}}),
                      param_space={{"x": tune.grid_search(list(range(n)))}},
                      tune_config=tune.TuneConfig(metric="score", mode="max")).fit()
    return [[h["it"] for h in r.metrics_history] for r in grid]


@pipeline
def searched(n: int = 2):
    return search(n)
'''


def test_a_resumed_run_continues_the_experiment_its_tuner_stage_left_when_the_scheduler_died(
        tmp_path: Path, home: Path) -> None:
    """``airflowless run --resume`` after the scheduler died inside a Tuner stage: the same experiment goes on."""
    module, marks, env, db = prepare(tmp_path, home, PIPELINE)
    env["MARKS"] = str(marks)
    first_cluster = start_process_cluster(n_workers=2, log_dir=tmp_path / "logs-1", env={"AIRFLOWLESS_HOME": str(home)})
    second_cluster = None
    try:
        first = subprocess.Popen([sys.executable, "-m", "airflowless.cli", "run", str(module)],
                                 env={**env, "AIRFLOWLESS_ADDRESS": first_cluster.address}, cwd=tmp_path,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def experiments() -> list[dict[str, Any]]:
            store = open_store(db)
            try:
                return [{**e, "trials": store.list_trials(e["id"])} for e in store.list_experiments()]
            finally:
                store.close()

        def part_way() -> bool:
            assert first.poll() is None, "the run ended before the kill:\n" + (first.stdout.read() if first.stdout else "")
            try:
                found = experiments()
            except Exception:  # being created
                return False
            return len(found) == 1 and len(found[0]["trials"]) == 2 and all(
                (t["iterations"] or 0) >= 3 for t in found[0]["trials"])

        eventually(part_way, timeout=120, interval=0.1, message=lambda: f"no progress: {experiments()}")
        os.killpg(first_cluster.scheduler_pid, signal.SIGKILL)
        output, _ = first.communicate(timeout=90)
        assert first.returncode != 0, output
        run_id = open_store(db).list_runs()[0].id
        stop_process_cluster(first_cluster)

        second_cluster = start_process_cluster(n_workers=2, log_dir=tmp_path / "logs-2",
                                               env={"AIRFLOWLESS_HOME": str(home)})
        second = subprocess.run([sys.executable, "-m", "airflowless.cli", "run", str(module), "--resume", str(run_id)],
                                env={**env, "AIRFLOWLESS_ADDRESS": second_cluster.address}, cwd=tmp_path,
                                capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stdout + second.stderr
        after = experiments()
        assert len(after) == 1, [(e["id"], e["name"], e["status"]) for e in after]  # the same one, not a second
        assert after[0]["status"] == "completed" and {t["status"] for t in after[0]["trials"]} == {"completed"}
        for trial in after[0]["trials"]:  # continued from a checkpoint, every report kept once
            runs = starts(marks, trial["name"])
            assert len(runs) == 2 and runs[1] > 0, (trial["name"], runs)
            store = open_store(db)
            assert [row["step"] for row in store.trial_metrics(trial["id"])] == list(range(1, 21))
            store.close()
    finally:
        for cluster in (first_cluster, second_cluster):
            if cluster is not None:
                stop_process_cluster(cluster)
