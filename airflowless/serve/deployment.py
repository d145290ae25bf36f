"""``@serve.deployment``: a class or function plus its options; ``.bind()`` builds an Application.

>>> from airflowless import serve
>>> @serve.deployment(num_replicas=2)
... class Echo:
...     def __call__(self, body):
...         return body
>>> app = Echo.bind()
>>> Echo.options(num_replicas=3).config.num_replicas
3
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, overload

from ..errors import ConfigError, UsageError
from ..pickled import PickledOnce, Sealed
from .application import Application
from .config import DeploymentConfig
from .routing import HTTPRoute, http_routes

__all__ = ["Deployment", "deployment"]

_OPTION_NAMES = {f.name for f in dataclasses.fields(DeploymentConfig)}


def _config_from(options: dict[str, Any], base: DeploymentConfig | None = None) -> DeploymentConfig:
    options = dict(options)
    actor_options = options.pop("ray_actor_options", None)
    if actor_options:  # Ray's spelling: {"num_cpus": 1, "num_gpus": 0, "resources": {...}, "max_concurrency": 4}
        if "max_concurrency" in actor_options:
            options.setdefault("max_concurrency", actor_options["max_concurrency"])
        resources = dict(actor_options.get("resources") or {})
        for key, name in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            if actor_options.get(key):
                resources[name] = actor_options[key]
        if resources:  # (max_concurrency alone keeps the deployment's resources)
            options["resources"] = {**options.get("resources", {}), **resources}
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise ConfigError(f"unknown deployment option(s) {sorted(unknown)}; expected some of "
                          f"{sorted(_OPTION_NAMES | {'name', 'ray_actor_options'})}")
    if options.get("autoscaling_config") is not None and "num_replicas" in options \
            and options["num_replicas"] not in (None, "auto"):
        raise ConfigError("give either num_replicas or autoscaling_config, not both")
    options.pop("num_replicas", None) if options.get("num_replicas") in (None, "auto") else None
    return dataclasses.replace(base, **options) if base is not None else DeploymentConfig(**options)


class Deployment:
    """A user class or function with the options its replicas run with."""

    def __init__(self, target: type | Callable[..., Any], *, name: str, config: DeploymentConfig) -> None:
        if not (inspect.isclass(target) or callable(target)):
            raise ConfigError(f"@serve.deployment goes on a class or a function, got {type(target).__name__}")
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigError(f"a deployment name must be a non-empty string without '/', got {name!r}")
        self.target = target
        self.name = name
        self.config = config
        self.http_routes: dict[str, HTTPRoute] = http_routes(target)
        """What HTTP reaches as the ingress: path under the route prefix -> method (see :mod:`.routing`)."""

    def sealed_target(self) -> Sealed:
        """The target pickled now, as a replica's spec carries it through the scheduler (see :mod:`..pickled`)."""
        return PickledOnce(self.target).sealed()

    @property
    def is_function(self) -> bool:
        return not inspect.isclass(self.target)

    def options(self, *, name: str | None = None, **options: Any) -> Deployment:
        """A copy with some options changed (same keywords as :func:`deployment`)."""
        return Deployment(self.target, name=name or self.name, config=_config_from(options, self.config))

    def bind(self, *args: Any, **kwargs: Any) -> Application:
        """An Application: this deployment with its constructor arguments (other Applications become handles)."""
        if self.is_function and (args or kwargs):
            raise ConfigError(f"deployment {self.name!r} is a function: bind() takes no arguments, "
                              f"got {len(args)} positional and {sorted(kwargs)} keyword")
        prepare = getattr(self.target, "__serve_bind__", None)  # a class's arguments settled in the caller
        if prepare is not None:
            args, kwargs = prepare(args, kwargs)
        return Application(self, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise UsageError(f"deployment {self.name!r} cannot be called directly; use "
                        f"serve.run({self.name}.bind(...)) and call the handle it returns")

    def __repr__(self) -> str:
        return f"Deployment(name={self.name!r}, num_replicas={self.config.num_replicas})"


@overload
def deployment(target: type | Callable[..., Any], /, *, name: str | None = None, **options: Any) -> Deployment: ...
@overload
def deployment(target: None = None, /, *, name: str | None = None, **options: Any) -> Callable[[Any], Deployment]: ...


def deployment(target: Any = None, /, *, name: str | None = None, **options: Any) -> Any:
    """Make a class (or function) a deployment. Options (keyword-only):

    ``num_replicas`` (1), ``max_ongoing_requests`` (100 per replica),
    ``max_queued_requests`` (1000; beyond that the proxy answers 503),
    ``autoscaling_config`` (an :class:`AutoscalingConfig` or dict), ``resources``
    (Dask worker resources, e.g. ``{"CPU": 1}``; Ray's ``ray_actor_options`` is
    accepted too), ``user_config`` (passed to the class's ``reconfigure``),
    ``health_check_period_s`` (2), ``graceful_shutdown_timeout_s`` (5),
    ``max_concurrency`` (1: how many plain ``def`` calls a replica runs at once,
    each in a thread of its own, as a Ray actor's ``max_concurrency``; ``async``
    methods always share the replica's event loop up to ``max_ongoing_requests``).

    >>> @deployment
    ... def double(body):
    ...     return {"y": 2 * body["x"]}
    """
    def wrap(obj: Any) -> Deployment:
        return Deployment(obj, name=str(name or getattr(obj, "__name__", "deployment")), config=_config_from(options))

    return wrap(target) if target is not None else wrap
