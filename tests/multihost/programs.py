"""Driver programs of the multi-host tests: ``python programs.py COMMAND ADDRESS OUT [ARGS...]``.

Run as a script (``__main__``), so the functions below reach the workers by
value, as a user's script's would. ADDRESS is a scheduler address, or
``embedded`` for a two-worker cluster on this host (the single-host
reference). Each rank writes what it saw to ``OUT/<name>-rank<r>.json`` (OUT
is on the filesystem every host shares); the last line printed is
``RESULT <json>``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _listening() -> list[str]:
    """``"ip port"`` of every TCP socket this process listens on."""
    import psutil

    return sorted({f"{c.laddr.ip} {c.laddr.port}" for c in psutil.Process().net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN})


def _worker_ip() -> str:
    from distributed import get_worker

    return str(get_worker().ip)


def _host_ip() -> str:
    """This host's own (non-loopback) IPv4 address: each simulated host has just one."""
    import psutil

    return next(a.address for addresses in psutil.net_if_addrs().values() for a in addresses
                if a.family.name == "AF_INET" and not a.address.startswith("127."))


def _note(config: dict[str, Any], name: str, **what: Any) -> None:
    from airflowless import train

    rank = train.get_context().world_rank
    Path(config["out"], f"{name}-rank{rank}.json").write_text(
        json.dumps({"ip": _worker_ip(), "listening": _listening(), **what}))


def _rank_data(rows: int = 400) -> tuple[Any, Any]:
    from airflowless import train

    rng = np.random.default_rng(train.get_context().world_rank)
    x = rng.normal(size=(rows, 4))
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.float32)


# -- trainers: each rank notes its host and listeners while its framework is connected -----------
def xgboost_loop(config: dict[str, Any]) -> None:
    import xgboost as xgb

    from airflowless import train

    x, y = _rank_data()
    matrix = xgb.DMatrix(x, label=y)

    class Note(xgb.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            if epoch == 1:
                _note(config, "xgboost")
            return False

    log: dict[str, Any] = {}
    xgb.train({"objective": "binary:logistic", "nthread": 1, "max_depth": 3, "seed": 0}, matrix,
              num_boost_round=8, evals=[(matrix, "train")], evals_result=log, callbacks=[Note()],
              verbose_eval=False)
    train.report({"train-logloss": float(log["train"]["logloss"][-1])})


def lightgbm_loop(config: dict[str, Any]) -> None:
    import lightgbm as lgb

    from airflowless import train
    from airflowless.train.context import _session  # the network parameters the backend made

    x, y = _rank_data()
    params = {"objective": "binary", "verbose": -1, "num_threads": 1, "tree_learner": "data", "seed": 0,
              "deterministic": True, **_session().backend_info}  # type: ignore[attr-defined]
    machines = params["machines"]

    def note(env: Any) -> None:
        if env.iteration == 1:
            _note(config, "lightgbm", machines=machines)

    booster = lgb.train(params, lgb.Dataset(x, label=y), num_boost_round=8, callbacks=[note])
    train.report({"prediction-sum": round(float(np.asarray(booster.predict(x[:50])).sum()), 6)})


def torch_loop(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from airflowless import train
    from airflowless.train.torch import prepare_model

    torch.manual_seed(0)
    x, y = _rank_data()
    features, labels = torch.tensor(x, dtype=torch.float32), torch.tensor(y).unsqueeze(1)
    model = prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    loss = torch.zeros(1)
    for step in range(10):
        optimizer.zero_grad()
        loss = loss_fn(model(features), labels)
        loss.backward()
        optimizer.step()
        if step == 0:
            _note(config, "torch", backend=dist.get_backend())
    dist.all_reduce(total := loss.detach().clone())
    train.report({"loss": round(float(total.item()) / dist.get_world_size(), 6)})


def trainers(out: str) -> dict[str, Any]:
    from airflowless.train import DataParallelTrainer, RunConfig, ScalingConfig
    from airflowless.train.backends.lightgbm import LightGBMBackend
    from airflowless.train.backends.xgboost import XGBoostBackend
    from airflowless.train.torch import TorchTrainer

    scaling, config = ScalingConfig(num_workers=2), {"out": out}
    run = RunConfig(verbose=0, storage_path=f"{out}/runs")
    fits = {  # torch first: XGBoost's and LightGBM's listeners on every interface may outlive their fits
        "torch": TorchTrainer(torch_loop, train_loop_config=config, scaling_config=scaling, run_config=run),
        "xgboost": DataParallelTrainer(xgboost_loop, backend=XGBoostBackend(), train_loop_config=config,
                                       scaling_config=scaling, run_config=run),
        "lightgbm": DataParallelTrainer(lightgbm_loop, backend=LightGBMBackend(), train_loop_config=config,
                                        scaling_config=scaling, run_config=run),
    }
    results = {}
    for name, trainer in fits.items():
        started = time.monotonic()
        result = trainer.fit()
        print(f"{name} fit in {time.monotonic() - started:.1f} s", flush=True)
        results[name] = {"error": None if result.error is None else str(result.error),
                         "metrics": {k: v for k, v in (result.metrics or {}).items() if "-" in k or k == "loss"}}
    return results


# -- a Dataset made on some hosts and consumed by ranks on others --------------------------------
def dataset(out: str) -> dict[str, Any]:
    from airflowless import data, train
    from airflowless.train import DataParallelTrainer, RunConfig, ScalingConfig

    def tag(batch: dict[str, Any]) -> dict[str, Any]:
        batch["made_on"] = np.full(len(batch["id"]), _worker_ip())
        return batch

    def consume(config: dict[str, Any]) -> None:
        rows, total, made_on = 0, 0, dict[str, int]()
        for batch in train.get_dataset_shard("train").iter_batches(batch_size=100):
            rows += len(batch["id"])
            total += int(batch["id"].sum())
            for host in batch["made_on"]:
                made_on[str(host)] = made_on.get(str(host), 0) + 1
        _note(config, "dataset", rows=rows, total=total, made_on=made_on)
        train.report({"rows": rows})

    # three blocks for two ranks: the middle block's rows go to both ranks, which run on different
    # hosts, so one rank reads rows made on the other host however Dask placed the blocks (with an
    # even count, a placement of half the blocks on each host lets locality keep every rank local)
    ds = data.range(4_000, parallelism=3).map_batches(tag)
    result = DataParallelTrainer(consume, train_loop_config={"out": out}, datasets={"train": ds},
                                 scaling_config=ScalingConfig(num_workers=2),
                                 run_config=RunConfig(verbose=0, storage_path=f"{out}/runs")).fit()
    return {"error": None if result.error is None else str(result.error)}


# -- serving: replicas on worker hosts, the HTTP ingress here -----------------------------------
def serve_and_cut(out: str, cut_request: str | None) -> dict[str, Any]:
    """Serve one replica; answer; if ``cut_request`` (a file) is given, ask the test to cut the replica's host."""
    import httpx

    from airflowless import serve

    @serve.deployment(num_replicas=1, health_check_period_s=0.5, health_check_timeout_s=3)
    class Where:
        def __call__(self, body: Any) -> dict[str, Any]:
            return {"ip": _host_ip(), "pid": os.getpid(), "got": body}

    import logging

    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d %(name)s %(message)s")
    serve.start(http_options={"port": 0})
    serve.run(Where.bind(), name="where", route_prefix="/where")  # type: ignore[attr-defined]
    url = f"{serve.http_address()}/where"
    first = httpx.post(url, json={"n": 1}, timeout=30).json()
    outcome: dict[str, Any] = {"url": url, "first": first}
    if cut_request:
        Path(cut_request).write_text(first["ip"])  # the test cuts that host's link now
        began = time.monotonic()
        deadline, after = began + 90, None
        while time.monotonic() < deadline:
            try:
                reply = httpx.post(url, json={"n": 2}, timeout=5)
                print(f"{time.monotonic() - began:.1f}s: {reply.status_code} {reply.text[:200]}", flush=True)
                if reply.status_code == 200 and reply.json()["ip"] != first["ip"]:
                    after = reply.json()
                    break
            except httpx.HTTPError as exc:
                print(f"{time.monotonic() - began:.1f}s: {exc!r}", flush=True)
            time.sleep(0.5)
        outcome["replaced_after_s"] = round(time.monotonic() - began, 1)
        outcome["after"] = after
        outcome["status"] = serve.status()
    serve.shutdown()
    return outcome


# -- training that loses a host: progress lines, then the result and what the store recorded -----
def paced_xgboost_loop(config: dict[str, Any]) -> None:
    """XGBoost, a checkpoint every 5 rounds, at a pace a test can interrupt (the ranks sleep a little per round)."""
    import tempfile

    import xgboost as xgb

    from airflowless import train
    from airflowless.train import Checkpoint
    from airflowless.train.xgboost import XGBoostTrainer

    x, y = _rank_data(2_000)
    matrix = xgb.DMatrix(x, label=y)
    restored = train.get_checkpoint()
    booster = XGBoostTrainer.get_model(restored) if restored is not None else None
    done = booster.num_boosted_rounds() if booster is not None else 0
    rank, total = train.get_context().world_rank, config["rounds"]

    class Report(xgb.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            time.sleep(0.25)
            round_ = done + epoch + 1
            metrics = {"boosting_round": round_, "train-logloss": evals_log["train"]["logloss"][-1]}
            if rank == 0 and round_ % 5 == 0:
                with tempfile.TemporaryDirectory() as folder:
                    model.save_model(os.path.join(folder, "model.ubj"))
                    train.report(metrics, Checkpoint.from_directory(folder))
            else:
                train.report(metrics)
            return False

    xgb.train({"objective": "binary:logistic", "nthread": 1, "max_depth": 3, "seed": 0}, matrix,
              num_boost_round=total - done, xgb_model=booster, evals=[(matrix, "train")],
              callbacks=[Report()], verbose_eval=False)


def train_with_faults(out: str, rounds: int) -> dict[str, Any]:
    from sqlalchemy import create_engine, text

    from airflowless.settings import get_settings
    from airflowless.train import (
        CheckpointConfig,
        DataParallelTrainer,
        FailureConfig,
        RunConfig,
        ScalingConfig,
        TrainingFailedError,
    )
    from airflowless.train.backends.xgboost import XGBoostBackend
    from airflowless.train.xgboost import XGBoostTrainer

    class Progress:
        def on_report(self, metrics: dict[str, Any], checkpoint: Any) -> None:
            print(f"round {metrics['boosting_round']}", flush=True)

    trainer = DataParallelTrainer(
        paced_xgboost_loop, backend=XGBoostBackend(timeout_s=20), train_loop_config={"rounds": rounds},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="faults", storage_path=f"{out}/runs", verbose=0,
                             failure_config=FailureConfig(max_failures=2),
                             checkpoint_config=CheckpointConfig(num_to_keep=2), callbacks=[Progress()]))
    result: Any
    try:
        result = trainer.fit()
    except TrainingFailedError as failed:
        result = failed.result
    with create_engine(get_settings().db_url).connect() as db:
        reports = [(row[0], json.loads(row[1]) if isinstance(row[1], str) else row[1]) for row in db.execute(text(
            "select m.step, m.\"values\" from metrics m join trials t on t.id = m.trial_id join experiments e "
            "on e.id = t.experiment_id where e.name = 'faults' order by m.id"))]
        checkpoints = [row[0] for row in db.execute(text(
            "select c.step from checkpoints c join trials t on t.id = c.trial_id join experiments e "
            "on e.id = t.experiment_id where e.name = 'faults' order by c.id"))]
        restarts = [row[0] for row in db.execute(text(
            "select t.restarts from trials t join experiments e on e.id = t.experiment_id where e.name = 'faults'"))]
    return {"error": None if result.error is None else str(result.error), "restarts": restarts,
            "steps": [step for step, _ in reports], "boosting_rounds": [m["boosting_round"] for _, m in reports],
            "checkpoints": checkpoints,
            "rounds": None if result.checkpoint is None else
            XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds()}


def main(argv: list[str]) -> None:
    import airflowless

    command, address, out = argv[1], argv[2], argv[3]
    if address == "embedded":
        airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
    else:
        airflowless.init(address, quiet=True)
    if command == "trainers":
        result = trainers(out)
    elif command == "dataset":
        result = dataset(out)
    elif command == "serve":
        result = serve_and_cut(out, argv[4] if len(argv) > 4 else None)
    elif command == "train-faults":
        result = train_with_faults(out, int(argv[4]))
    else:
        raise SystemExit(f"unknown command {command!r}")
    print("RESULT " + json.dumps(result, default=str), flush=True)
    airflowless.shutdown()


if __name__ == "__main__":
    main(sys.argv)
