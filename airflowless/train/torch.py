"""TorchTrainer: a PyTorch training loop on N ranks joined by ``torch.distributed``.

Gloo connects CPU ranks, NCCL GPU ranks (``ScalingConfig(use_gpu=True)``);
rank 0's worker hosts the rendezvous. Inside the loop, ``prepare_model`` and
``prepare_data_loader`` make ordinary PyTorch code distributed:

>>> from airflowless import train
>>> from airflowless.train import ScalingConfig
>>> from airflowless.train.torch import TorchTrainer, get_device, prepare_model
>>> def loop(config):                                             # doctest: +SKIP
...     import torch
...     model = prepare_model(torch.nn.Linear(6, 1))              # DDP when world_size > 1
...     shard = train.get_dataset_shard("train")                  # equal rows on every rank
...     for epoch in range(config["epochs"]):
...         for batch in shard.iter_torch_batches(batch_size=256, device=str(get_device())):
...             ...
...         train.report({"epoch": epoch})
>>> TorchTrainer(loop, train_loop_config={"epochs": 2},        # doctest: +SKIP
...              scaling_config=ScalingConfig(num_workers=2), datasets={"train": ds}).fit()

This module imports torch only when a function that needs it runs, and
``import airflowless.train`` does not import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError, ConfigError
from . import gather_buckets
from .backends.torch import TorchBackend, torch_device
from .checkpoint import Checkpoint
from .config import DataConfig, RunConfig, ScalingConfig
from .context import get_context
from .torch_checkpoint import TorchCheckpoint, TorchPredictor
from .trainer import DataParallelTrainer

if TYPE_CHECKING:
    import torch

__all__ = ["TorchTrainer", "TorchConfig", "TorchBackend", "TorchCheckpoint", "TorchPredictor", "prepare_model",
           "prepare_data_loader", "get_device", "DeviceDataLoader"]

_PROCESS_GROUP_BACKENDS = ("gloo", "nccl", "mpi")


@dataclass(frozen=True, kw_only=True)
class TorchConfig:
    """How the ranks connect: ``backend`` (None: nccl with GPUs, else gloo) and the rendezvous timeout.

    >>> TorchConfig(backend="gloo", timeout_s=30).timeout_s
    30
    """

    backend: str | None = None
    timeout_s: float = 60

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in _PROCESS_GROUP_BACKENDS:
            raise ConfigError(f"TorchConfig.backend must be None (automatic) or one of {_PROCESS_GROUP_BACKENDS}, "
                              f"got {self.backend!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ConfigError(f"TorchConfig.timeout_s must be a number of seconds > 0, got {self.timeout_s!r}")


class TorchTrainer(DataParallelTrainer):
    """``train_loop_per_worker(config)`` on ``num_workers`` ranks in one torch process group.

    Every rank gets exactly the same number of rows from ``get_dataset_shard``
    (DDP's collectives run in lock-step). Rank 0's ``train.report(...,
    checkpoint=...)`` is kept; ``train.get_checkpoint()`` hands it back on
    restart or with ``resume_from_checkpoint``.
    """

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: dict[str, Any] | None = None,
                 scaling_config: ScalingConfig | None = None, run_config: RunConfig | None = None,
                 datasets: dict[str, Any] | None = None, resume_from_checkpoint: Checkpoint | None = None,
                 torch_config: TorchConfig | None = None, preprocessor: Any = None,
                 metadata: dict[str, Any] | None = None, dataset_config: DataConfig | None = None) -> None:
        torch_config = TorchConfig() if torch_config is None else torch_config
        if not isinstance(torch_config, TorchConfig):
            raise ConfigError(f"torch_config must be a TorchConfig, got {type(torch_config).__name__}")
        self.torch_config = torch_config
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                         resume_from_checkpoint=resume_from_checkpoint, preprocessor=preprocessor, metadata=metadata,
                         dataset_config=dataset_config)

    def _validate(self) -> None:
        super()._validate()
        if self.torch_config.backend == "nccl" and not self.scaling_config.use_gpu:
            raise ConfigError("TorchConfig(backend='nccl') needs GPU ranks; set ScalingConfig(use_gpu=True) "
                              "or use backend='gloo' (the default on CPU)")
        # built here, not in __init__: a Tune trial's overrides of these configs come through _validate too
        self._backend = TorchBackend(backend=self.torch_config.backend, timeout_s=float(self.torch_config.timeout_s),
                                     threads=_rank_threads(self.scaling_config))

    def _config_for_record(self) -> dict[str, Any]:
        backend = self.torch_config.backend or ("nccl" if self.scaling_config.use_gpu else "gloo")
        return {**super()._config_for_record(), "torch_backend": backend}


def _rank_threads(scaling_config: ScalingConfig) -> int:
    """Torch threads per rank: the whole CPUs the rank holds (at least one), as Ray sets ``OMP_NUM_THREADS``.

    >>> _rank_threads(ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2.5}))
    2
    """
    cpus = scaling_config.rank_resources.get("CPU", 1.0)
    return max(1, int(cpus))


def get_device() -> torch.device:
    """This rank's device: ``cuda:0`` on a GPU rank (its worker sees one GPU), else ``cpu``.

    >>> str(get_device())          # outside a training loop: the CPU
    'cpu'
    """
    import torch

    return torch.device(torch_device(get_context().use_gpu))


def prepare_model(model: torch.nn.Module, *, move_to_device: bool = True,
                  ddp_kwargs: dict[str, Any] | None = None, gather_small_buckets: bool = True) -> torch.nn.Module:
    """``model`` on this rank's device, wrapped in ``DistributedDataParallel`` when there are several ranks.

    The DDP wrapper averages gradients across the ranks on ``backward()``;
    on gloo, small buckets by one all-gather, faster than gloo's allreduce
    (:mod:`.gather_buckets`). DDP takes one communication hook per model:
    pass ``gather_small_buckets=False`` to register your own
    (``model.register_comm_hook``). Save ``model.module.state_dict()`` (or unwrap with ``getattr(model,
    "module", model)``) so the checkpoint loads into a plain model.
    """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    device = get_device()
    if move_to_device:
        model = model.to(device)
    if get_context().world_size <= 1:
        return model
    if not dist.is_initialized():
        raise ClusterError("prepare_model found no torch process group: call it inside a TorchTrainer's "
                           "train_loop_per_worker")
    kwargs: dict[str, Any] = {"device_ids": [device.index or 0]} if device.type == "cuda" else {}
    wrapped = DistributedDataParallel(model, **kwargs, **(ddp_kwargs or {}))
    if gather_small_buckets and device.type == "cpu" and dist.get_backend(wrapped.process_group) == "gloo":
        gather_buckets.install(wrapped)
    return wrapped


def prepare_data_loader(loader: Any, *, add_dist_sampler: bool = True, move_to_device: bool = True) -> Any:
    """A copy of ``loader`` that gives each rank its own part of the data, with batches on the rank's device.

    With several ranks (and ``add_dist_sampler``) the copy samples with a
    ``DistributedSampler`` (shuffling if the original shuffled; call
    ``loader.sampler.set_epoch(epoch)`` each epoch to reshuffle). On a GPU
    rank, batches (tensors, or lists/tuples/dicts of them) move to the device.
    """
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

    context = get_context()
    if add_dist_sampler and context.world_size > 1 and not isinstance(loader.sampler, DistributedSampler):
        if loader.batch_size is None:
            raise ConfigError("prepare_data_loader cannot shard a DataLoader built with a custom batch_sampler; "
                              "pass add_dist_sampler=False and shard it yourself")
        sampler: DistributedSampler[Any] = DistributedSampler(
            loader.dataset, num_replicas=context.world_size, rank=context.world_rank,
            shuffle=isinstance(loader.sampler, RandomSampler))
        loader = DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler,
                            num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                            pin_memory=loader.pin_memory, drop_last=loader.drop_last, timeout=loader.timeout,
                            worker_init_fn=loader.worker_init_fn, generator=loader.generator,
                            persistent_workers=loader.persistent_workers)
    device = get_device()
    if move_to_device and device.type != "cpu":
        return DeviceDataLoader(loader, device)
    return loader


class DeviceDataLoader:
    """Iterates ``loader`` with every batch moved to ``device`` (``sampler``/``dataset`` stay reachable)."""

    def __init__(self, loader: Any, device: torch.device | str) -> None:
        import torch

        self.loader = loader
        self.device = torch.device(device)
        self.sampler = loader.sampler
        self.dataset = loader.dataset
        self.batch_size = loader.batch_size

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield _to_device(batch, self.device)


def _to_device(value: Any, device: torch.device) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        moved = [_to_device(v, device) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else type(value)(moved)
    return value
