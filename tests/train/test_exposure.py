"""Framework sockets of training ranks listen on the worker's own address, not on every interface.

Each test holds the ranks of a real 2-rank fit at a point of their training
(they wait for a ``distributed.Event``), lists the listening sockets of the
worker processes there, and only then lets them finish.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from uuid import uuid4

import numpy as np
import pytest

from airflowless import train
from airflowless.train import DataParallelTrainer, RunConfig, ScalingConfig
from tests.support.eventually import eventually

pytestmark = pytest.mark.usefixtures("cluster_client", "home")

WILDCARDS = {"0.0.0.0", "::"}


def _listening() -> list[tuple[str, int]]:
    import psutil

    return sorted((c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections(kind="inet")
                  if c.status == psutil.CONN_LISTEN)


def _hold(config: dict[str, Any]) -> None:
    """Say this rank is here, then wait until the test has looked at the sockets."""
    from distributed import Event

    Path(config["out"], f"holding-{train.get_context().world_rank}").write_text("")
    assert Event(config["event"]).wait(timeout=120), "the test never released the ranks"


def _hold_sample_release(client: Any, trainer: DataParallelTrainer, out: Path, event: str,
                         holding: list[str]) -> dict[str, list[tuple[str, int]]]:
    """Fit in a thread; once the ranks in ``holding`` hold, return the listeners opened since the fit began."""
    from distributed import Event

    before = client.run(_listening)
    outcome: dict[str, Any] = {}
    fit = threading.Thread(target=lambda: outcome.update(result=trainer.fit()))
    fit.start()
    try:
        eventually(lambda: all((out / name).exists() for name in holding), timeout=120)

        def opened() -> dict[str, list[tuple[str, int]]]:
            """The listeners opened since the fit began, once there are any."""
            now = client.run(_listening)
            found = {w: sorted(set(now[w]) - set(before.get(w, []))) for w in now}
            return found if any(found.values()) else {}

        new = eventually(opened, timeout=60)
    finally:
        Event(event, client=client).set()
        fit.join(timeout=180)
    assert outcome["result"].error is None
    return new


def _workers_hosts(client: Any) -> set[str]:
    from urllib.parse import urlparse

    return {urlparse(w).hostname or "" for w in client.run(lambda: 0)}


def _setup(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    out = tmp_path / "ranks"
    out.mkdir()
    event = f"exposure-{uuid4().hex[:8]}"
    return out, event, {"out": str(out), "event": event}


# -- torch (gloo): its rendezvous store and gloo's pairs ------------------------------------
def _torch_loop(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    value = torch.ones(1)
    dist.all_reduce(value)  # gloo is connected
    _hold(config)
    dist.barrier()


def test_torch_store_and_gloo_listen_on_the_worker_address(cluster_client: Any, tmp_path: Path) -> None:
    from airflowless.train.torch import TorchTrainer

    out, event, config = _setup(tmp_path)
    trainer = TorchTrainer(_torch_loop, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(verbose=0))
    new = _hold_sample_release(cluster_client, trainer, out, event, ["holding-0", "holding-1"])
    hosts = _workers_hosts(cluster_client)
    opened = [address for addresses in new.values() for address in addresses]
    assert opened, "no listener of the training ranks was seen"
    assert {ip for ip, _ in opened} <= hosts, new  # the store and gloo: on the workers' address only
    assert not {ip for ip, _ in opened} & WILDCARDS


# -- XGBoost: its tracker, and the communicator of each rank -----------------------------------
def _xgboost_loop(config: dict[str, Any]) -> None:
    import xgboost as xgb

    rng = np.random.default_rng(train.get_context().world_rank)
    x = rng.normal(size=(200, 3))
    matrix = xgb.DMatrix(x, label=(x[:, 0] > 0).astype(int))

    class Hold(xgb.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            if epoch == 1:
                _hold(config)
            return False

    xgb.train({"objective": "binary:logistic", "nthread": 1}, matrix, num_boost_round=3, callbacks=[Hold()])


@pytest.mark.xfail(strict=True, reason="XGBoost 3.2's communicator binds its listeners to INADDR_ANY in C++ "
                                       "(TCPSocket::BindHost in RabitComm::Bootstrap); it has no option to choose")
def test_xgboost_listens_on_the_worker_address(cluster_client: Any, tmp_path: Path) -> None:
    from airflowless.train.backends.xgboost import XGBoostBackend

    out, event, config = _setup(tmp_path)
    trainer = DataParallelTrainer(_xgboost_loop, train_loop_config=config, backend=XGBoostBackend(),
                                  scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0))
    new = _hold_sample_release(cluster_client, trainer, out, event, ["holding-0", "holding-1"])
    opened = {ip for addresses in new.values() for ip, _ in addresses}
    assert opened and not opened & WILDCARDS, new


# -- LightGBM: each rank's listener while the network is set up -------------------------------
def _lightgbm_loop(config: dict[str, Any]) -> None:
    import lightgbm as lgb

    from airflowless.train.context import _session

    rank = train.get_context().world_rank
    if rank == 1:  # rank 0 meanwhile waits in LightGBM's network setup, listening
        _hold(config)
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(200, 3))
    params = {"objective": "binary", "verbose": -1, "num_threads": 1, "tree_learner": "data",
              **_session().backend_info}  # type: ignore[attr-defined]
    lgb.train(params, lgb.Dataset(x, label=(x[:, 0] > 0).astype(int)), num_boost_round=2)


@pytest.mark.xfail(strict=True, reason="LightGBM 4.7 binds its listener to 0.0.0.0 in C++ "
                                       "(TcpSocket::Bind in Linkers); machines/local_listen_port choose no address")
def test_lightgbm_listens_on_the_worker_address(cluster_client: Any, tmp_path: Path) -> None:
    from airflowless.train.backends.lightgbm import LightGBMBackend

    out, event, config = _setup(tmp_path)
    trainer = DataParallelTrainer(_lightgbm_loop, train_loop_config=config, backend=LightGBMBackend(),
                                  scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0))
    new = _hold_sample_release(cluster_client, trainer, out, event, ["holding-1"])
    opened = {ip for addresses in new.values() for ip, _ in addresses}
    assert opened and not opened & WILDCARDS, new
