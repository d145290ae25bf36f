"""Trial schedulers: FIFO, ASHA / async HyperBand, median stopping."""

from .asha import ASHAScheduler, AsyncHyperBandScheduler
from .base import Decision, FIFOScheduler, TrialScheduler, TrialView
from .median import MedianStoppingRule
from .pbt import PopulationBasedTraining

HyperBandScheduler = AsyncHyperBandScheduler

__all__ = ["Decision", "TrialScheduler", "TrialView", "FIFOScheduler", "ASHAScheduler", "AsyncHyperBandScheduler",
           "HyperBandScheduler", "MedianStoppingRule", "PopulationBasedTraining"]
