"""Kill a rank's worker mid-training: the group restarts from its latest checkpoint (or fails clearly)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from distributed import Client

from airflowless.runtime.processes import kill_worker
from tests.support.process_cluster import process_cluster_fixture

cluster = process_cluster_fixture(n_workers=3, resources={"CPU": 1})

DRIVER = """
import json, sys
import airflowless
from airflowless import data
from airflowless.datasets import add_features, make_taxi
from airflowless.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
from airflowless.train.xgboost import XGBoostTrainer

address, folder, max_failures = sys.argv[1], sys.argv[2], int(sys.argv[3])
airflowless.init(address, quiet=True)
make_taxi(60_000, n_files=4, path=f"{folder}/taxi", seed=3)
ds = data.read_parquet(f"{folder}/taxi").map_batches(add_features, batch_format="pyarrow").drop_columns(
    ["pickup_ts", "dropoff_ts", "tip_amount"])
train_ds, valid_ds = ds.train_test_split(test_size=0.3)

class Progress:
    def on_report(self, metrics, checkpoint):
        print(f"round {metrics['boosting_round']}", flush=True)

trainer = XGBoostTrainer(
    label_column="is_big_tip", num_boost_round=int(sys.argv[4]), checkpoint_frequency=5, timeout_s=20,
    params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "max_depth": 6, "eta": 0.1},
    scaling_config=ScalingConfig(num_workers=2), datasets={"train": train_ds, "valid": valid_ds},
    run_config=RunConfig(storage_path=f"{folder}/runs", failure_config=FailureConfig(max_failures=max_failures),
                         checkpoint_config=CheckpointConfig(num_to_keep=2), callbacks=[Progress()]))
try:
    result = trainer.fit()
except TrainingFailedError as failed:
    result = failed.result
print("RESULT " + json.dumps({"metrics": result.metrics, "error": None if result.error is None else str(result.error),
                              "rounds": None if result.checkpoint is None else
                              XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds()}), flush=True)
airflowless.shutdown()
"""


def _drive(cluster, tmp_path: Path, max_failures: int, rounds: int, kill_at: int | None,  # noqa: ANN001
           **settings: str) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), **settings}
    proc = subprocess.Popen([sys.executable, str(script), cluster.address, str(tmp_path), str(max_failures),
                             str(rounds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    result, killed = None, False
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        if kill_at is not None and not killed and line.strip() == f"round {kill_at}":
            _kill_a_rank_worker(cluster)
            killed = True
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
        assert time.monotonic() < deadline, "training did not finish"
    proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert kill_at is None or killed, "training ended before the kill"
    assert result is not None
    return result


def _kill_a_rank_worker(cluster) -> None:  # noqa: ANN001
    with Client(cluster.address, timeout=10) as client:
        def rank_workers(dask_scheduler):  # noqa: ANN001, ANN202
            return sorted({ts.processing_on.name for key, ts in dask_scheduler.tasks.items()
                           if "-rank1-" in str(key) and ts.processing_on is not None})

        names = client.run_on_scheduler(rank_workers)
    assert names, "no rank 1 is running"
    kill_worker(cluster, int(str(names[0]).rsplit("-", 1)[1]))


def test_a_lost_rank_restarts_from_the_latest_checkpoint_and_reaches_the_same_quality(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    undisturbed = _drive(cluster, tmp_path / "a", max_failures=0, rounds=40, kill_at=None)
    disturbed = _drive(cluster, tmp_path / "b", max_failures=1, rounds=40, kill_at=12)
    assert disturbed["error"] is None
    assert disturbed["rounds"] == 40
    assert abs(disturbed["metrics"]["valid-logloss"] - undisturbed["metrics"]["valid-logloss"]) < 0.01


def test_without_retries_a_lost_rank_is_a_clear_error(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    # the surviving rank, blocked in XGBoost's allreduce, is ended after 2 s instead of the default 10 + 5
    outcome = _drive(cluster, tmp_path, max_failures=0, rounds=400, kill_at=3,
                     AIRFLOWLESS_TRAIN_FAILED_GRACE_S="2", AIRFLOWLESS_TRAIN_GRACE_S="2")
    assert outcome["error"] is not None
    assert "lost with its worker" in outcome["error"] or "failed" in outcome["error"]
