"""airflowless.tune: hyperparameter search over functions and Trainers, on the Dask cluster.

>>> from airflowless import tune
>>> tune.uniform(0.2, 0.4)
Float(lower=0.2, upper=0.4, log=False, q=None, mean=None, sd=None)
"""

from ..train.checkpoint import Checkpoint
from ..train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ..train.context import get_checkpoint, get_context, report
from .analysis import ExperimentAnalysis, run
from .callback import Callback, LoggerCallback
from .config import TuneConfig
from .result_grid import ResultGrid
from .schedulers import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
    Decision,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from .search.searcher import BasicVariantGenerator, ConcurrencyLimiter, Searcher
from .search.space import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from .stoppers import FunctionStopper, MaximumIterationStopper, TimeoutStopper, TrialPlateauStopper
from .trainable import Trainable
from .tuner import Tuner
from .wrappers import with_parameters, with_resources

__all__ = ["Tuner", "TuneConfig", "ResultGrid", "report", "get_checkpoint", "get_context", "uniform", "quniform",
           "loguniform", "qloguniform", "randn", "qrandn", "randint", "qrandint", "lograndint", "qlograndint",
           "choice", "grid_search", "sample_from", "Searcher", "BasicVariantGenerator", "ConcurrencyLimiter",
           "TrialScheduler", "FIFOScheduler", "ASHAScheduler", "AsyncHyperBandScheduler", "HyperBandScheduler",
           "MedianStoppingRule", "PopulationBasedTraining", "Decision", "MaximumIterationStopper", "TimeoutStopper", "TrialPlateauStopper",
           "FunctionStopper", "OptunaSearch", "HyperOptSearch",
           "with_parameters", "with_resources", "Callback", "LoggerCallback", "RunConfig", "CheckpointConfig", "FailureConfig", "ScalingConfig",
           "Checkpoint", "run", "ExperimentAnalysis", "Trainable"]



def __getattr__(name: str) -> object:
    # the adapters import their libraries, so they load on first use
    if name == "OptunaSearch":
        from .search.optuna import OptunaSearch

        return OptunaSearch
    if name == "HyperOptSearch":
        from .search.hyperopt import HyperOptSearch

        return HyperOptSearch
    raise AttributeError(f"module 'airflowless.tune' has no attribute {name!r}")
