"""Search algorithms, importable as Ray's ``ray.tune.search`` names them.

``from airflowless.tune.search import ConcurrencyLimiter``; the Optuna and
HyperOpt searchers are in ``airflowless.tune.search.optuna`` and
``airflowless.tune.search.hyperopt`` (imported when used: their libraries are
optional).
"""

from .searcher import BasicVariantGenerator, ConcurrencyLimiter, Searcher

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "Searcher"]
