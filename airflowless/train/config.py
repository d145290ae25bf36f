"""Configuration of a training run: how many ranks, where results go, what to keep.

>>> ScalingConfig(num_workers=2).rank_resources
{'CPU': 1.0}
>>> RunConfig(name="taxi", checkpoint_config=CheckpointConfig(num_to_keep=2)).name
'taxi'

All keyword-only, validated when built (before anything is scheduled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..names import check_name

__all__ = ["ScalingConfig", "RunConfig", "CheckpointConfig", "FailureConfig"]


def _is_int(value: Any) -> bool:
    """An integer, and not a bool (``True`` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class ScalingConfig:
    """How many ranks train, and what each one asks of its Dask worker.

    ``num_workers`` ranks run on distinct worker processes; each declares
    ``resources_per_worker`` (default ``{"CPU": 1}``, plus ``{"GPU": 1}`` when
    ``use_gpu``). Data tasks declare nothing, so ingest still runs on workers
    whose declared CPUs the ranks hold.
    """

    num_workers: int = 1
    use_gpu: bool = False
    resources_per_worker: dict[str, float] | None = None
    trainer_resources: dict[str, float] | None = None  # accepted for Ray compatibility; the driver needs none

    def __post_init__(self) -> None:
        if not _is_int(self.num_workers) or self.num_workers < 1:
            raise ConfigError(f"ScalingConfig.num_workers must be an integer >= 1, got {self.num_workers!r}")
        for name, amount in (self.resources_per_worker or {}).items():
            if not isinstance(amount, (int, float)) or amount < 0:
                raise ConfigError(
                    f"ScalingConfig.resources_per_worker maps names to amounts >= 0, got {name}={amount!r}")

    @property
    def rank_resources(self) -> dict[str, float]:
        wanted = {k: float(v) for k, v in (self.resources_per_worker or {"CPU": 1}).items()}
        wanted.setdefault("CPU", 1.0)
        if self.use_gpu:
            wanted.setdefault("GPU", 1.0)
        return {k: v for k, v in wanted.items() if v > 0}


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Which checkpoints to keep: the best ``num_to_keep`` by a score (and always the latest).

    ``checkpoint_frequency`` and ``checkpoint_at_end`` are for what saves itself (as in Ray): class
    trainables (``tune.Trainable``) save every that many steps and after the last one (a step that
    returns ``done``); the XGBoost and LightGBM trainers every that many rounds (they always save at the
    end). A TorchTrainer's loop saves what it reports, so they are refused there.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.checkpoint_frequency) or self.checkpoint_frequency < 0:
            raise ConfigError("CheckpointConfig.checkpoint_frequency must be an integer >= 0 (0: never), "
                              f"got {self.checkpoint_frequency!r}")
        if self.checkpoint_at_end is not None and not isinstance(self.checkpoint_at_end, bool):
            raise ConfigError(f"CheckpointConfig.checkpoint_at_end must be True, False or None, "
                              f"got {self.checkpoint_at_end!r}")
        if self.num_to_keep is not None and (not _is_int(self.num_to_keep) or self.num_to_keep < 1):
            raise ConfigError(f"CheckpointConfig.num_to_keep must be None or an integer >= 1, got {self.num_to_keep!r}")
        if self.checkpoint_score_attribute is not None and not isinstance(self.checkpoint_score_attribute, str):
            raise ConfigError("CheckpointConfig.checkpoint_score_attribute must be a reported metric's name, "
                              f"got {self.checkpoint_score_attribute!r}")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ConfigError(
                f"CheckpointConfig.checkpoint_score_order must be 'max' or 'min', got {self.checkpoint_score_order!r}")


@dataclass(frozen=True)
class DataConfig:
    """Which of a trainer's datasets each rank gets a share of (Ray's): ``"all"``, or a list of names;
    every rank gets the whole of the others (a validation set each rank scores in full, say)."""

    datasets_to_split: str | Sequence[str] = "all"
    execution_options: Any = None  # Ray's; accepted (the executor's budget is DataContext's)

    def __post_init__(self) -> None:
        split = self.datasets_to_split
        if split != "all" and (isinstance(split, str) or not all(isinstance(n, str) for n in split)):
            raise ConfigError(f"DataConfig.datasets_to_split is \"all\" or a list of dataset names, got {split!r}")

    def splits(self, name: str) -> bool:
        return self.datasets_to_split == "all" or name in self.datasets_to_split


@dataclass(frozen=True, kw_only=True)
class FailureConfig:
    """How many times a group whose rank died restarts from its latest checkpoint (-1: forever)."""

    max_failures: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.max_failures) or self.max_failures < -1:
            raise ConfigError(f"FailureConfig.max_failures must be an integer >= -1, got {self.max_failures!r}")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Where a run keeps its checkpoints and results, and how it handles failures.

    ``storage_path``: a local folder or an fsspec URL (default ``$AIRFLOWLESS_STORAGE``).
    ``callbacks``: objects with any of ``on_start(name, config, path)``, ``on_report(metrics, checkpoint)``
    (``metrics`` with its ``training_iteration``), ``on_end(result)``; Tune callbacks
    (:class:`airflowless.tune.Callback`, e.g. ``MLflowLoggerCallback``) see a fit as one trial.
    A Tuner calls its own ``RunConfig``'s Tune callbacks per trial.
    """

    name: str | None = None
    storage_path: str | None = None
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    callbacks: Sequence[Any] = ()
    stop: Any = None  # Tune: a dict of thresholds, a function (trial_id, result) -> bool, or stoppers
    verbose: int = 1

    def __post_init__(self) -> None:
        if self.name is not None:
            check_name("RunConfig.name", self.name)
        if not isinstance(self.checkpoint_config, CheckpointConfig):
            raise ConfigError(f"RunConfig.checkpoint_config must be a CheckpointConfig, got {self.checkpoint_config!r}")
        if not isinstance(self.failure_config, FailureConfig):
            raise ConfigError(f"RunConfig.failure_config must be a FailureConfig, got {self.failure_config!r}")
