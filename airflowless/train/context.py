"""What a rank knows about itself, and the calls user training code makes.

Inside ``train_loop_per_worker`` (and a Tune function trainable):

>>> from airflowless import train
>>> def loop(config):                                   # doctest: +SKIP
...     ctx = train.get_context()
...     shard = train.get_dataset_shard("train")
...     for epoch in range(config["epochs"]):
...         train.report({"epoch": epoch, "loss": 0.1}, checkpoint=None)
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import AirflowlessError, UsageError

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .shards import DataShard

__all__ = ["TrainContext", "report", "get_checkpoint", "get_context", "get_dataset_shard", "StopRequested",
           "Session", "session_scope"]


class StopRequested(BaseException):
    """Raised inside ``report`` when the driver asked the run to stop (a scheduler, a stopper)."""


@dataclass(frozen=True)
class TrainContext:
    world_rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    experiment_name: str = ""
    trial_name: str = ""
    trial_id: str = ""
    trial_dir: str = ""
    use_gpu: bool = False

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_trial_name(self) -> str:
        return self.trial_name

    def get_trial_id(self) -> str:
        return self.trial_id

    def get_trial_dir(self) -> str:
        return self.trial_dir

    def get_experiment_name(self) -> str:
        return self.experiment_name


@dataclass
class Session:
    """The state of one rank while its loop runs; reports go to ``emit``."""

    context: TrainContext
    emit: Any  # callable(dict) -> None
    storage_dir: str
    checkpoint: Checkpoint | None = None
    shards: dict[str, DataShard] = field(default_factory=dict)
    should_stop: Any = None  # callable() -> bool
    iteration: int = 0
    start_iteration: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # where the rank's time went: data, checkpoint, ...
    rendezvous: Any = None  # the group's Rendezvous: small values exchanged between its ranks

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None, *,
               gather: Sequence[int] = (), send: bool = True) -> None:
        """Send this step's report; ``gather`` (rank 0): ranks whose reports of the same step add
        the metrics they computed (see ``gather.ReportGatherer``). ``send=False``: count the step and
        answer a stop request, but send nothing (a rank whose metrics no report gathers)."""
        from .checkpoint import persist_directory

        if not isinstance(metrics, dict):
            raise UsageError(f"report takes a dict of metrics, got {type(metrics).__name__}")
        self.iteration += 1
        if not send:
            if self.should_stop is not None and self.should_stop():
                raise StopRequested()
            return
        step = self.start_iteration + self.iteration
        uri = None
        if checkpoint is not None and self.context.world_rank == 0:
            uri = f"{self.storage_dir.rstrip('/')}/checkpoint_{step:06d}"
            began = time.perf_counter()
            persist_directory(checkpoint.path, uri)
            self.seconds["checkpoint"] = self.seconds.get("checkpoint", 0.0) + time.perf_counter() - began
        if checkpoint is not None and checkpoint.remove_after_report:  # copied (rank 0), or never kept
            shutil.rmtree(checkpoint.path, ignore_errors=True)
        from ..jsonsafe import to_plain

        message = {"rank": self.context.world_rank, "step": step, "metrics": to_plain(metrics),
                   "checkpoint": uri, "time": time.time()}
        if gather:
            message["gather"] = list(gather)
        self.emit(message)
        if self.should_stop is not None and self.should_stop():
            raise StopRequested()


_local = threading.local()


class session_scope:
    """Install ``session`` for the current thread while the loop runs."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __enter__(self) -> Session:
        _local.session = self.session
        return self.session

    def __exit__(self, *exc: object) -> None:
        _local.session = None


class NoSessionError(AirflowlessError, RuntimeError):
    """A train call made outside a training loop."""


def _session() -> Session:
    session = getattr(_local, "session", None)
    if session is None:
        raise NoSessionError(
            "this call only works inside a training loop run by a Trainer (train_loop_per_worker) "
            "or a Tune trainable")
    return session  # type: ignore[no-any-return]


def report(metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
    """Report this iteration's metrics (and a checkpoint directory to keep)."""
    _session().report(metrics, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from (after a restart, or ``resume_from_checkpoint``), else None."""
    return _session().checkpoint


def get_context() -> TrainContext:
    session = getattr(_local, "session", None)
    return session.context if session is not None else TrainContext()


def get_dataset_shard(name: str = "train") -> DataShard:
    """This rank's part of the dataset ``name`` given to the Trainer."""
    shards = _session().shards
    if name not in shards:
        raise KeyError(f"no dataset {name!r} was given to the Trainer; it has {sorted(shards)}")
    return shards[name]
