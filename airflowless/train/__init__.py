"""airflowless.train: trainers whose ranks run on Dask workers, with checkpoints and restarts.

>>> from airflowless.train import ScalingConfig, RunConfig
>>> from airflowless.train.xgboost import XGBoostTrainer            # doctest: +SKIP
"""

from ..errors import TrainingDataError, TrainingFailedError
from .checkpoint import Checkpoint
from .config import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
from .context import TrainContext, get_checkpoint, get_context, get_dataset_shard, report
from .placement import CapacityError
from .result import Result
from .trainer import BaseTrainer, DataParallelTrainer

__all__ = ["Checkpoint", "CheckpointConfig", "DataConfig", "FailureConfig", "RunConfig", "ScalingConfig", "TrainContext",
           "get_checkpoint", "get_context", "get_dataset_shard", "report", "Result", "BaseTrainer",
           "DataParallelTrainer", "TrainingFailedError", "TrainingDataError", "CapacityError"]
