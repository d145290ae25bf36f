"""Train without a cluster: configs, placement, checkpoint keeping and storage, torch device/backend choice."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from airflowless import data
from airflowless.errors import ConfigError
from airflowless.train import (
    CapacityError,
    Checkpoint,
    CheckpointConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)
from airflowless.train.checkpoint import CheckpointManager, persist_directory
from airflowless.train.context import Session, TrainContext, session_scope
from airflowless.train.placement import check_capacity, choose_workers


def _torch_trainer(saving: CheckpointConfig) -> Any:
    from airflowless.train.torch import TorchTrainer

    return TorchTrainer(lambda config: None, run_config=RunConfig(checkpoint_config=saving))._validate()


def test_a_gbdt_trainer_takes_ray_s_checkpoint_frequency_from_its_run_config() -> None:
    from airflowless.train.trainer import FitRun
    from airflowless.train.xgboost import XGBoostTrainer

    trainer = XGBoostTrainer(label_column="y", datasets={"train": data.from_pandas(pd.DataFrame({"x": [1], "y": [0]}))},
                             run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_frequency=3)))
    trainer._validate()
    assert trainer._loop_config(FitRun())["checkpoint_frequency"] == 3


# -- configs ---------------------------------------------------------------------
@pytest.mark.parametrize(("build", "message"), [
    (lambda: ScalingConfig(num_workers=0), "num_workers must be an integer >= 1, got 0"),
    (lambda: ScalingConfig(num_workers="2"), "num_workers must be an integer >= 1, got '2'"),
    (lambda: ScalingConfig(num_workers=True), "num_workers must be an integer >= 1, got True"),
    (lambda: ScalingConfig(resources_per_worker={"CPU": -1}), "amounts >= 0, got CPU=-1"),
    (lambda: RunConfig(name="a/b"), "RunConfig.name must be a non-empty name without '/'"),
    (lambda: RunConfig(name=".."), "got '..', which names a folder"),
    (lambda: RunConfig(name=""), "RunConfig.name must be a non-empty name"),
    (lambda: RunConfig(checkpoint_config={"num_to_keep": 1}), "checkpoint_config must be a CheckpointConfig"),
    (lambda: RunConfig(failure_config=3), "failure_config must be a FailureConfig, got 3"),
    (lambda: CheckpointConfig(num_to_keep=0), "num_to_keep must be None or an integer >= 1, got 0"),
    (lambda: CheckpointConfig(checkpoint_score_order="up"), "must be 'max' or 'min', got 'up'"),
    (lambda: FailureConfig(max_failures=-2), "max_failures must be an integer >= -1, got -2"),
    (lambda: FailureConfig(max_failures=1.5), "max_failures must be an integer >= -1, got 1.5"),
    (lambda: FailureConfig(max_failures=True), "max_failures must be an integer >= -1, got True"),
    (lambda: CheckpointConfig(num_to_keep=True), "num_to_keep must be None or an integer >= 1, got True"),
    (lambda: CheckpointConfig(checkpoint_score_attribute=3), "checkpoint_score_attribute must be a reported"),
    (lambda: CheckpointConfig(checkpoint_at_end="yes"), "checkpoint_at_end must be True, False or None, got 'yes'"),
    (lambda: _torch_trainer(CheckpointConfig(checkpoint_frequency=5)), "TorchTrainer saves the checkpoints its loop"),
])
def test_invalid_config_values_raise_config_error(build: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build()
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)  # user errors are ValueErrors too


def test_configs_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        ScalingConfig(2)  # type: ignore[misc]


@pytest.mark.parametrize(("config", "expected"), [
    (ScalingConfig(), {"CPU": 1.0}),
    (ScalingConfig(use_gpu=True), {"CPU": 1.0, "GPU": 1.0}),
    (ScalingConfig(resources_per_worker={"CPU": 2, "disk": 0}), {"CPU": 2.0}),  # zero amounts are dropped
    (ScalingConfig(resources_per_worker={"memory_gb": 4}), {"memory_gb": 4.0, "CPU": 1.0}),
    (ScalingConfig(resources_per_worker={"CPU": 0}), {}),  # a rank that asks for nothing
    (ScalingConfig(use_gpu=True, resources_per_worker={"GPU": 2}), {"GPU": 2.0, "CPU": 1.0}),
])
def test_rank_resources(config: ScalingConfig, expected: dict[str, float]) -> None:
    assert config.rank_resources == expected


# -- placement -------------------------------------------------------------------
def test_choose_workers_prefers_given_workers_then_the_freest() -> None:
    free = {"a": {"CPU": 1.0}, "b": {"CPU": 4.0}, "c": {"CPU": 2.0}, "d": {"CPU": 0.0}}
    assert choose_workers(free, {"CPU": 1.0}, 2) == ["b", "c"]
    assert choose_workers(free, {"CPU": 1.0}, 2, prefer=["a"]) == ["a", "b"]
    assert choose_workers(free, {"CPU": 1.0}, 3, prefer=["d", "c"]) == ["c", "b", "a"]  # d has no room
    assert choose_workers(free, {"CPU": 2.0}, 3) is None  # gang placement: all or nothing
    assert choose_workers(free, {"GPU": 1.0}, 1) is None


def test_check_capacity_names_what_the_workers_offer() -> None:
    totals = {"a": {"CPU": 1.0}, "b": {"CPU": 1.0}}
    check_capacity(totals, {"CPU": 1.0}, 2, what="T")  # fits: no error
    with pytest.raises(CapacityError) as info:
        check_capacity(totals, {"CPU": 1.0}, 3, what="XGBoostTrainer")
    message = str(info.value)
    assert "XGBoostTrainer asks for 3 rank(s) with {'CPU': 1.0} each" in message
    assert "only 2 of the cluster's 2 worker(s)" in message
    assert "workers offer {'CPU': 1.0}" in message
    assert "lower ScalingConfig.num_workers" in message
    with pytest.raises(CapacityError, match=r"0 of the cluster's 2 worker\(s\).*offer \{'CPU': 1.0\}"):
        check_capacity(totals, {"CPU": 1.0, "GPU": 1.0}, 1, what="T")
    with pytest.raises(CapacityError, match=r"offer nothing \(no workers\)"):
        check_capacity({}, {"CPU": 1.0}, 1, what="T")
    assert issubclass(CapacityError, ConfigError)


# -- checkpoints -----------------------------------------------------------------
def _register(manager: CheckpointManager, scores: list[float | None]) -> list[str]:
    dropped: list[str] = []
    for i, score in enumerate(scores):
        metrics = {} if score is None else {"acc": score}
        dropped += [c.path for c in manager.register(Checkpoint(f"c{i}"), metrics)]
    return dropped


def test_checkpoint_manager_keeps_the_best_by_score_and_the_latest() -> None:
    manager = CheckpointManager(num_to_keep=2, score_attribute="acc", score_order="max")
    dropped = _register(manager, [0.5, 0.9, 0.1, 0.8, 0.2])
    assert sorted(dropped) == ["c0", "c2"]
    assert [c.path for c, _ in manager.best] == ["c1", "c3", "c4"]  # best first; c4 is kept as the latest
    assert manager.latest == Checkpoint("c4")

    low = CheckpointManager(num_to_keep=1, score_attribute="loss", score_order="min")
    for i, loss in enumerate([0.3, 0.1, 0.2]):
        low.register(Checkpoint(f"l{i}"), {"loss": loss})
    assert [c.path for c, _ in low.best] == ["l1", "l2"]

    newest = CheckpointManager(num_to_keep=2)  # no score: the newest are the best
    assert _register(newest, [None, None, None, None]) == ["c0", "c1"]
    assert [c.path for c, _ in newest.best] == ["c3", "c2"]

    everything = CheckpointManager()
    assert _register(everything, [0.1, 0.2, 0.3]) == []
    assert len(everything.kept) == 3

    unscored = CheckpointManager(num_to_keep=1, score_attribute="acc")  # a report without the score ranks last
    assert _register(unscored, [0.4, None, 0.2]) == ["c1"]


def _write_tree(folder: Path) -> dict[str, str]:
    files = {"model.json": '{"w": 1}', "sub/state.bin": "abc"}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return files


def _read_tree(folder: str) -> dict[str, str]:
    root = Path(folder)
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_local_checkpoint_directories(tmp_path: Path) -> None:
    source = tmp_path / "src"
    files = _write_tree(source)
    ckpt = Checkpoint.from_directory(source)
    assert ckpt.is_local
    with ckpt.as_directory() as folder:
        assert folder == str(source)  # a local checkpoint is used in place
    copy = ckpt.to_directory(tmp_path / "copy")
    assert _read_tree(copy) == files
    persisted = persist_directory(str(source), str(tmp_path / "kept" / "checkpoint_000001"))
    assert _read_tree(persisted.path) == files
    assert not list((tmp_path / "kept").glob("*.tmp"))  # the atomic copy leaves no temporary folder


def test_memory_url_checkpoint_round_trip(tmp_path: Path) -> None:
    import fsspec

    source = tmp_path / "src"
    files = _write_tree(source)
    uri = f"memory://airflowless-test/{uuid.uuid4().hex}/checkpoint_000001"
    ckpt = persist_directory(str(source), uri)
    try:
        assert ckpt == Checkpoint(uri) and not ckpt.is_local
        assert _read_tree(ckpt.to_directory(tmp_path / "back")) == files
        with ckpt.as_directory() as folder:
            assert _read_tree(folder) == files
            local = folder
        assert not Path(local).exists()  # the temporary copy is removed afterwards
    finally:
        fsspec.filesystem("memory").rm(uri.removeprefix("memory://"), recursive=True)


# -- trainers' argument checks (no cluster: nothing runs) ----------------------------
def test_sklearn_trainer_takes_exactly_one_rank() -> None:
    from sklearn.linear_model import LogisticRegression

    from airflowless.train.sklearn import SklearnTrainer

    ds = data.from_pandas(pd.DataFrame({"x": [0.0, 1.0], "y": [0, 1]}))
    with pytest.raises(ConfigError, match=r"exactly one rank, got ScalingConfig\(num_workers=2\)"):
        SklearnTrainer(estimator=LogisticRegression(), label_column="y", datasets={"train": ds},
                       scaling_config=ScalingConfig(num_workers=2))
    with pytest.raises(ConfigError, match=r"needs datasets=\{'train'"):
        SklearnTrainer(estimator=LogisticRegression(), label_column="y", datasets={"valid": ds})
    with pytest.raises(ConfigError, match="must be a scikit-learn estimator"):
        SklearnTrainer(estimator=object(), label_column="y", datasets={"train": ds})
    with pytest.raises(ConfigError, match="scoring must be"):
        SklearnTrainer(estimator=LogisticRegression(), label_column="y", datasets={"train": ds}, scoring=3)


# -- torch: device and process-group backend choice (GPU paths cannot run here) --------
def test_torch_backend_and_device_choice() -> None:
    from airflowless.train.backends.torch import TorchBackend, torch_device

    assert TorchBackend().process_group_backend(True) == "nccl"
    assert TorchBackend().process_group_backend(False) == "gloo"
    assert TorchBackend(backend="gloo").process_group_backend(True) == "gloo"
    assert torch_device(True) == "cuda:0"  # each GPU worker sees its own GPU as device 0
    assert torch_device(False) == "cpu"
    assert TorchBackend().equal_shards  # DDP's collectives need equal rows on every rank


def test_torch_config_and_trainer_checks() -> None:
    from airflowless.train.torch import TorchConfig, TorchTrainer

    assert TorchConfig().backend is None
    with pytest.raises(ConfigError, match=r"backend must be None \(automatic\) or one of"):
        TorchConfig(backend="tcp")
    with pytest.raises(ConfigError, match="timeout_s must be a number of seconds > 0, got 0"):
        TorchConfig(timeout_s=0)
    with pytest.raises(ConfigError, match="needs GPU ranks"):
        TorchTrainer(lambda: None, torch_config=TorchConfig(backend="nccl"))
    with pytest.raises(ConfigError, match="torch_config must be a TorchConfig"):
        TorchTrainer(lambda: None, torch_config={"backend": "gloo"})  # type: ignore[arg-type]
    trainer = TorchTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=2, use_gpu=True))
    assert trainer._backend.process_group_backend(True) == "nccl"  # type: ignore[attr-defined]
    assert trainer._config_for_record()["torch_backend"] == "nccl"


def _session(rank: int, size: int, *, use_gpu: bool = False) -> session_scope:
    context = TrainContext(world_rank=rank, world_size=size, use_gpu=use_gpu)
    return session_scope(Session(context, emit=lambda message: None, storage_dir=""))


def test_get_device_follows_the_rank() -> None:
    from airflowless.train.torch import get_device

    assert str(get_device()) == "cpu"  # outside a loop
    with _session(0, 1, use_gpu=True):
        assert str(get_device()) == "cuda:0"  # chosen without touching CUDA
    with _session(0, 1):
        assert str(get_device()) == "cpu"


def test_prepare_model_on_one_rank_is_the_model() -> None:
    import torch

    from airflowless.train.torch import prepare_model

    model = torch.nn.Linear(3, 1)
    with _session(0, 1):
        assert prepare_model(model) is model  # no DDP wrapper with one rank


def test_prepare_data_loader_shards_with_a_distributed_sampler() -> None:
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from airflowless.train.torch import DeviceDataLoader, prepare_data_loader

    dataset = TensorDataset(torch.arange(10.0), torch.arange(10.0) * 2)
    loader = DataLoader(dataset, batch_size=2, shuffle=True)
    with _session(0, 1):
        assert prepare_data_loader(loader) is loader  # one CPU rank: nothing to change
    seen = []
    for rank in (0, 1):
        with _session(rank, 2):
            sharded = prepare_data_loader(loader)
        assert isinstance(sharded.sampler, DistributedSampler)
        assert sharded.sampler.rank == rank and sharded.sampler.num_replicas == 2 and sharded.sampler.shuffle
        assert sharded.batch_size == 2
        seen.append(sorted(float(x) for batch in sharded for x in batch[0]))
    assert len(seen[0]) == len(seen[1]) == 5
    assert sorted(seen[0] + seen[1]) == [float(i) for i in range(10)]  # the ranks split the rows

    ordered = DataLoader(dataset, batch_size=4)
    with _session(1, 2):
        assert not prepare_data_loader(ordered).sampler.shuffle
    custom = DataLoader(dataset, batch_sampler=[[0, 1], [2, 3]])
    with _session(0, 2), pytest.raises(ConfigError, match="custom batch_sampler"):
        prepare_data_loader(custom)

    moved = DeviceDataLoader(DataLoader(dataset, batch_size=5), "meta")  # a device that needs no hardware
    batches = list(moved)
    assert len(moved) == 2 and len(batches) == 2
    assert all(t.device.type == "meta" for batch in batches for t in batch)


def test_importing_train_does_not_import_the_frameworks() -> None:
    import subprocess
    import sys

    code = ("import sys, airflowless.train, airflowless.train.xgboost, airflowless.train.lightgbm, "
            "airflowless.train.sklearn; "
            "print(sorted(m for m in ('torch', 'xgboost', 'lightgbm', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "[]"
