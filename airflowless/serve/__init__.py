"""airflowless.serve: deployments as replicas (Dask actors) behind an HTTP ingress.

>>> from airflowless import serve
>>> @serve.deployment(num_replicas=2)
... class Doubler:
...     def __call__(self, body):
...         return {"y": 2 * body["x"]}
>>> handle = serve.run(Doubler.bind(), name="doubler")      # doctest: +SKIP
>>> handle.remote({"x": 21}).result()                        # doctest: +SKIP
{'y': 42}
>>> # or: curl -X POST 127.0.0.1:8000/ -d '{"x": 21}'

The folder is the architecture: ``deployment``/``application`` (what the user
declares), ``controller`` (core, no I/O) + ``autoscaling`` (pure decision),
``driver`` (Dask side: carries out the controller's actions), ``context`` (this process's runtime),
``replica`` (the actor), ``replica_table`` (where replicas listen), ``wire`` (data plane), ``router``,
``handle``, ``routing`` (what HTTP reaches), ``ingress`` (FastAPI apps), ``streaming``, ``multiplex``,
``proxy`` (ASGI), ``http_server``, ``heap``, ``batching``,
``predictor``, ``records`` (the store). No module imports one that imports it back (``tests/test_layering.py``).
"""

from __future__ import annotations

from .api import delete, get_app_handle, http_address, http_client_ssl, run, shutdown, start, status
from .application import Application
from .batch_predictor import BatchPredictor
from .batching import batch
from .config import AutoscalingConfig, DeploymentConfig
from .deployment import Deployment, deployment
from .errors import (
    BackPressureError,
    BadRequestError,
    DeploymentNotFoundError,
    ReplicaDiedError,
    ServeError,
)
from .handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator
from .http_options import HTTPOptions
from .ingress import ingress
from .multiplex import get_multiplexed_model_id, multiplexed
from .predictor import Predictor, PredictorDeployment
from .routing import route

__all__ = [
    "deployment", "Deployment", "Application", "batch", "route", "HTTPOptions", "run", "start", "status", "delete", "shutdown",
    "get_app_handle", "http_address", "http_client_ssl", "DeploymentHandle", "DeploymentResponse",
    "DeploymentResponseGenerator", "ingress", "multiplexed", "get_multiplexed_model_id", "AutoscalingConfig",
    "DeploymentConfig", "PredictorDeployment", "Predictor", "BatchPredictor", "ServeError", "BadRequestError",
    "BackPressureError", "ReplicaDiedError", "DeploymentNotFoundError",
]
