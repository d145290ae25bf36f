"""A rank that never reports again after a peer failed is ended: interrupted, or its worker restarted.

On the real 2-worker cluster of the test session.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from airflowless import train
from airflowless.errors import TrainingFailedError
from airflowless.train import (
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)
from airflowless.train.rank_threads import running_ranks
from tests.support.eventually import eventually

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def _one_fails_one_hangs(config: dict[str, Any]) -> None:
    """Rank 0 fails at once; rank 1 never reports, in Python code or blocked in C."""
    rank = train.get_context().world_rank
    if rank == 0:
        raise ValueError("rank 0 broke")
    Path(config["out"], "started").write_text("")
    try:
        if config["in_c"]:
            time.sleep(600)  # no exception reaches a thread blocked here
        else:
            spins = 0
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                spins += 1
    finally:
        Path(config["out"], "ended").write_text("")


def _ranks_running(client: Any) -> dict[str, list[int]]:
    return {w: ranks for w, ranks in client.run(running_ranks).items() if ranks}


@pytest.mark.parametrize("in_c", [False, True], ids=["python", "blocked-in-c"])
def test_a_rank_that_never_reports_after_its_peer_failed_is_ended(
        in_c: bool, cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOWLESS_TRAIN_FAILED_GRACE_S", "1")
    monkeypatch.setenv("AIRFLOWLESS_TRAIN_GRACE_S", "2")
    workers_before = sorted(cluster_client.scheduler_info()["workers"])
    trainer = DataParallelTrainer(
        _one_fails_one_hangs, train_loop_config={"out": str(tmp_path), "in_c": in_c},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=f"straggler-{in_c}", failure_config=FailureConfig(max_failures=0), verbose=0))
    began = time.monotonic()
    with pytest.raises(TrainingFailedError, match="rank 0 broke"):
        trainer.fit()
    took = time.monotonic() - began
    assert (tmp_path / "started").exists()
    assert took < 60, f"fit took {took:.1f} s to give up on the hanging rank"

    # no thread of any rank is left on the workers: the Python loop was interrupted (its finally ran),
    # the sleep ended with its worker process, which was restarted
    eventually(lambda: _ranks_running(cluster_client) == {}, timeout=30,
               message=lambda: f"ranks still running: {_ranks_running(cluster_client)}")
    if in_c:
        assert not (tmp_path / "ended").exists()
        eventually(lambda: len(cluster_client.scheduler_info()["workers"]) == len(workers_before), timeout=60)
        assert sorted(cluster_client.scheduler_info()["workers"]) != workers_before
    else:
        assert (tmp_path / "ended").exists()
        assert sorted(cluster_client.scheduler_info()["workers"]) == workers_before
    again = DataParallelTrainer(lambda: train.report({"ok": 1}), scaling_config=ScalingConfig(num_workers=2),
                                run_config=RunConfig(verbose=0)).fit()
    assert again.error is None and again.metrics == {"ok": 1}
