"""``with_parameters`` and ``with_resources``: a function trainable with large objects or its own resources.

>>> from airflowless import tune
>>> def objective(config, data):
...     tune.report({"score": config["x"] * len(data)})
>>> wrapped = tune.with_resources(tune.with_parameters(objective, data=list(range(1000))), {"CPU": 1})
>>> wrapped.resources
{'CPU': 1.0}

The objects are put on the cluster once when the Tuner starts (``client.scatter``)
and each trial's task takes their futures as inputs, so Dask copies them to a
worker at most once instead of every trial shipping its own copy.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..pickled import Sealed

__all__ = ["with_parameters", "with_resources", "ParameterizedTrainable", "run_parameterized_trial"]


class ParameterizedTrainable:
    """A function trainable called as ``fn(config, **objects)``, asking Dask for ``resources`` per trial."""

    def __init__(self, fn: Any, objects: dict[str, Any], resources: dict[str, float] | None) -> None:
        self.fn, self.objects, self.resources = fn, objects, resources
        self._futures: dict[str, Any] | None = None  # on the driver, once scattered
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def put_objects(self, client: Any) -> dict[str, Any]:
        """Scatter the objects to the cluster once (the Tuner calls this when it starts); their futures."""
        if self._futures is None:
            self._futures = {name: client.scatter([obj], hash=False)[0] for name, obj in self.objects.items()}
        return self._futures

    def __call__(self, config: dict[str, Any]) -> Any:
        return self.fn(config, **self.objects)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self._futures is not None:  # the cluster holds them (this driver-side object keeps them alive)
            state.update(objects={}, _futures=None)
        return state

    def __repr__(self) -> str:
        return f"ParameterizedTrainable({self.__name__}, objects={sorted(self.objects)}, resources={self.resources})"


def run_parameterized_trial(objects: dict[str, Any], trainable: ParameterizedTrainable | Sealed, *args: Any) -> Any:
    """The task of a trial whose objects Dask resolved from their futures (fetched once per worker, as inputs)."""
    from .function_trial import run_function_trial

    opened: ParameterizedTrainable = trainable.open() if isinstance(trainable, Sealed) else trainable
    return run_function_trial(ParameterizedTrainable(opened.fn, objects, opened.resources), *args)


def _as_parameterized(trainable: Any, where: str) -> ParameterizedTrainable:
    from ..train.trainer import BaseTrainer

    if isinstance(trainable, ParameterizedTrainable):
        return trainable
    if isinstance(trainable, BaseTrainer) or not callable(trainable):
        raise ConfigError(f"tune.{where} wraps a function trainable, got {trainable!r}; a Trainer takes "
                          "its resources from its ScalingConfig and its objects from its constructor")
    return ParameterizedTrainable(trainable, {}, None)


def with_parameters(trainable: Any, **objects: Any) -> ParameterizedTrainable:
    """``trainable(config, **objects)`` in every trial, the objects put on the cluster once.

    >>> def train(config, table):
    ...     return {"rows": len(table)}
    >>> with_parameters(train, table=[1, 2, 3])({"x": 1})
    {'rows': 3}
    """
    base = _as_parameterized(trainable, "with_parameters")
    return ParameterizedTrainable(base.fn, {**base.objects, **objects}, base.resources)


def with_resources(trainable: Any, resources: Any) -> ParameterizedTrainable:
    """Each trial's task asks Dask for ``resources``: a dict like ``{"CPU": 2}`` or a ScalingConfig.

    A ScalingConfig gives one rank's resources (a function trial is one task on one worker).

    >>> with_resources(lambda config: None, {"CPU": 1, "GPU": 0}).resources
    {'CPU': 1.0}
    """
    base = _as_parameterized(trainable, "with_resources")
    return ParameterizedTrainable(base.fn, base.objects, _resources(resources))


def _resources(resources: Any) -> dict[str, float]:
    if hasattr(resources, "rank_resources"):  # a ScalingConfig
        return dict(resources.rank_resources)
    if isinstance(resources, dict):
        wanted = {}
        for name, amount in resources.items():
            key = {"cpu": "CPU", "gpu": "GPU"}.get(str(name).lower(), str(name))
            if not isinstance(amount, (int, float)) or isinstance(amount, bool) or amount < 0:
                raise ConfigError(f"tune.with_resources maps names to amounts >= 0, got {name}={amount!r}")
            if amount > 0:
                wanted[key] = float(amount)
        return wanted
    raise ConfigError(f"tune.with_resources takes a dict like {{'CPU': 1}} or a ScalingConfig, got {resources!r}; "
                      "a function of the config (as Ray accepts) is not supported")
