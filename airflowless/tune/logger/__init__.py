"""Loggers of Tune trials (Ray's ``ray.tune.logger`` and ``ray.air.integrations.mlflow``).

>>> from airflowless import tune
>>> from airflowless.tune.logger import MLflowLoggerCallback, TBXLoggerCallback
>>> run_config = tune.RunConfig(callbacks=[                        # doctest: +SKIP
...     MLflowLoggerCallback(tracking_uri="http://127.0.0.1:5000", experiment_name="taxi"),
...     TBXLoggerCallback()])

One module per integration; each imports its library when the callback is
built (``pip install "airflowless[tracking]"``), so importing this package
costs nothing. A new logger subclasses :class:`LoggerCallback` and gets a
line here.
"""

from ..callback import LoggerCallback
from .flat import flatten
from .mlflow import MLflowLoggerCallback
from .tensorboardx import TBXLoggerCallback

__all__ = ["LoggerCallback", "MLflowLoggerCallback", "TBXLoggerCallback", "flatten"]

