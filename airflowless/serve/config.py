"""Deployment and autoscaling options: frozen, keyword-only, validated when built.

>>> DeploymentConfig(num_replicas=2).num_replicas
2
>>> AutoscalingConfig(min_replicas=1, max_replicas=4).initial
1
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

__all__ = ["DeploymentConfig", "AutoscalingConfig"]


def _check(name: str, value: Any, *, minimum: Any, kind: type | tuple[type, ...] = (int, float)) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or not value >= minimum or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"{name} must be a finite number >= {minimum}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class AutoscalingConfig:
    """How many replicas to run from the ongoing requests: ``ceil(ongoing / target_ongoing_requests)``.

    A change is applied only after the wish has held for ``upscale_delay_s`` (up)
    or ``downscale_delay_s`` (down), and stays within ``[min_replicas, max_replicas]``.
    """

    min_replicas: int = 1
    max_replicas: int = 1
    initial_replicas: int | None = None
    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 3.0
    downscale_delay_s: float = 10.0
    metrics_interval_s: float = 0.5

    def __post_init__(self) -> None:
        _check("min_replicas", self.min_replicas, minimum=0, kind=int)
        _check("max_replicas", self.max_replicas, minimum=1, kind=int)
        if self.max_replicas < self.min_replicas:
            raise ConfigError(f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})")
        if self.initial_replicas is not None:
            _check("initial_replicas", self.initial_replicas, minimum=0, kind=int)
            if not self.min_replicas <= self.initial_replicas <= self.max_replicas:
                raise ConfigError(f"initial_replicas must be within [min_replicas, max_replicas] = "
                                  f"[{self.min_replicas}, {self.max_replicas}], got {self.initial_replicas}")
        if isinstance(self.target_ongoing_requests, bool) or not self.target_ongoing_requests > 0:
            raise ConfigError(f"target_ongoing_requests must be > 0, got {self.target_ongoing_requests!r}")
        for name in ("upscale_delay_s", "downscale_delay_s"):
            _check(name, getattr(self, name), minimum=0)
        _check("metrics_interval_s", self.metrics_interval_s, minimum=0.05)

    @property
    def initial(self) -> int:
        return self.initial_replicas if self.initial_replicas is not None else max(self.min_replicas, 1)

    @classmethod
    def coerce(cls, value: AutoscalingConfig | dict[str, Any] | None) -> AutoscalingConfig | None:
        if value is None or isinstance(value, AutoscalingConfig):
            return value
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ConfigError(f"unknown autoscaling_config keys {sorted(unknown)}; "
                                  f"expected some of {sorted(cls.__dataclass_fields__)}")
            return cls(**value)
        raise ConfigError(f"autoscaling_config must be an AutoscalingConfig or a dict, got {type(value).__name__}")


@dataclass(frozen=True, kw_only=True)
class DeploymentConfig:
    """Options of one deployment (see :func:`airflowless.serve.deployment`)."""

    num_replicas: int = 1
    max_ongoing_requests: int = 100
    max_queued_requests: int = 1000
    autoscaling_config: AutoscalingConfig | None = None
    resources: dict[str, float] = field(default_factory=dict)
    user_config: Any = None
    health_check_period_s: float = 2.0
    health_check_timeout_s: float = 10.0
    graceful_shutdown_timeout_s: float = 5.0
    max_surge: int = 1  # a rolling update starts at most this many new replicas at a time
    max_concurrency: int = 1  # threads per replica that run plain ``def`` calls at once (Ray's threaded actor)

    def __post_init__(self) -> None:
        _check("num_replicas", self.num_replicas, minimum=0, kind=int)
        _check("max_ongoing_requests", self.max_ongoing_requests, minimum=1, kind=int)
        _check("max_queued_requests", self.max_queued_requests, minimum=0, kind=int)
        _check("health_check_period_s", self.health_check_period_s, minimum=0.05)
        _check("health_check_timeout_s", self.health_check_timeout_s, minimum=0.05)
        _check("graceful_shutdown_timeout_s", self.graceful_shutdown_timeout_s, minimum=0)
        _check("max_surge", self.max_surge, minimum=1, kind=int)
        _check("max_concurrency", self.max_concurrency, minimum=1, kind=int)
        if not isinstance(self.resources, dict) or not all(
                isinstance(k, str) and isinstance(v, int | float) and v >= 0 for k, v in self.resources.items()):
            raise ConfigError(f"resources must be a dict of name -> amount >= 0 (e.g. {{'CPU': 1}}), "
                              f"got {self.resources!r}")
        object.__setattr__(self, "autoscaling_config", AutoscalingConfig.coerce(self.autoscaling_config))

    @property
    def initial_replicas(self) -> int:
        auto = self.autoscaling_config
        return auto.initial if auto is not None else self.num_replicas
