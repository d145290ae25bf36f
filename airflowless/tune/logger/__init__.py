"""Loggers of Tune trials (Ray's ``ray.tune.logger`` and ``ray.air.integrations.mlflow``).

>>> from airflowless import tune
>>> from airflowless.tune.logger import CSVLoggerCallback, MLflowLoggerCallback, TBXLoggerCallback
>>> run_config = tune.RunConfig(callbacks=[                        # doctest: +SKIP
...     MLflowLoggerCallback(tracking_uri="http://127.0.0.1:5000", experiment_name="taxi"),
...     TBXLoggerCallback(), CSVLoggerCallback()])

One module per integration; each imports its library when the callback is
built (``pip install "airflowless[tracking]"``), so importing this package
costs nothing (the JSON and CSV files need no library). A new logger
subclasses :class:`LoggerCallback` and gets a line here.
"""

from ..callback import LoggerCallback
from .files import CSVLoggerCallback, JsonLoggerCallback
from .flat import flatten
from .mlflow import MLflowLoggerCallback
from .tensorboardx import TBXLoggerCallback

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "MLflowLoggerCallback", "TBXLoggerCallback",
           "flatten"]

