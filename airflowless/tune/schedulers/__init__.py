"""Trial schedulers: FIFO, ASHA / async HyperBand, median stopping."""

from .asha import ASHAScheduler, AsyncHyperBandScheduler
from .base import Decision, FIFOScheduler, TrialScheduler, TrialView
from .median import MedianStoppingRule

HyperBandScheduler = AsyncHyperBandScheduler

__all__ = ["Decision", "TrialScheduler", "TrialView", "FIFOScheduler", "ASHAScheduler", "AsyncHyperBandScheduler",
           "HyperBandScheduler", "MedianStoppingRule"]
