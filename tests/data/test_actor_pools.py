"""Ray's actor pools for a map_batches class: at most ``max`` instances, ``min`` at first and grown while work
waits, let go when the operator is done (data.compute, data.execution.pools); on the 2-worker cluster."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from airflowless import data
from airflowless.data import ActorPoolStrategy


class Tagger:
    """Tags each row with the process it ran in; says where it was built."""

    def __init__(self, folder: str, seconds: float) -> None:
        self.pid, self.seconds = os.getpid(), seconds
        Path(folder, f"built-{self.pid}-{uuid.uuid4().hex}").touch()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        time.sleep(self.seconds)
        return {**batch, "pid": np.full(len(batch["id"]), self.pid)}


def _run(folder: Path, seconds: float, **pool: Any) -> tuple[set[int], int, list[int]]:
    """(processes the rows ran in, instances built, the ids seen)."""
    ds = data.range(8, parallelism=8).map_batches(Tagger, fn_constructor_args=(str(folder), seconds),
                                                  batch_size=None, **pool)
    rows = ds.take_all()
    return {int(r["pid"]) for r in rows}, len(list(folder.glob("built-*"))), sorted(int(r["id"]) for r in rows)


@pytest.mark.parametrize("pool", [{"compute": ActorPoolStrategy(size=1)}, {"concurrency": 1},
                                  {"concurrency": (1, 1)}], ids=["size", "concurrency", "range"])
def test_a_pool_of_one_builds_one_instance_and_runs_every_block_on_it(cluster_client: Any, tmp_path: Path,
                                                                      pool: dict[str, Any]) -> None:
    pids, built, ids = _run(tmp_path, 0.05, **pool)
    assert ids == list(range(8))
    assert len(pids) == 1 and built == 1


def test_an_autoscaling_pool_grows_to_its_max_while_blocks_wait(cluster_client: Any, tmp_path: Path) -> None:
    pids, built, ids = _run(tmp_path, 0.4, compute=ActorPoolStrategy(min_size=1, max_size=2))
    assert ids == list(range(8))
    assert len(pids) == 2 and built == 2  # a second instance, on the other worker, once the first was busy


@pytest.mark.parametrize("read", ["take_all", "take"])
def test_the_pool_lets_its_instances_go_when_the_operator_is_done(cluster_client: Any, tmp_path: Path,
                                                                  read: str) -> None:
    from airflowless.data import transforms

    def held() -> int:
        return sum(cluster_client.run(lambda: len(transforms._INSTANCES)).values())

    before = held()
    ds = data.range(8, parallelism=8).map_batches(Tagger, fn_constructor_args=(str(tmp_path), 0.2),
                                                  batch_size=None, concurrency=(1, 2))
    rows = ds.take_all() if read == "take_all" else ds.take(1)  # take(1) cancels the blocks it does not need
    assert len(rows) == (8 if read == "take_all" else 1)
    deadline = time.monotonic() + 20
    while held() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert held() == before


def test_two_runs_of_one_dataset_each_build_their_own_instances(cluster_client: Any, tmp_path: Path) -> None:
    ds = data.range(8, parallelism=8).map_batches(Tagger, fn_constructor_args=(str(tmp_path), 0.05),
                                                  batch_size=None, compute=ActorPoolStrategy(size=1))
    assert ds.count() == 8 and len(ds.take_all()) == 8
    assert len(list(tmp_path.glob("built-*"))) == 2  # one per run: a run's release never drops the next run's


def test_a_function_keeps_concurrency_as_a_bound(cluster_client: Any) -> None:
    ds = data.range(8, parallelism=8).map_batches(lambda b: b, concurrency=(1, 2))
    assert sorted(r["id"] for r in ds.take_all()) == list(range(8))
    assert ds._plan.pool is None
