"""Stages: the Python functions a pipeline is made of.

>>> from airflowless import stage
>>> @stage(retries=2, timeout=600)
... def load(path: str) -> int:
...     return len(path)
>>> load("abc")                 # outside a pipeline a stage is a plain call
3

Inside a pipeline function, calling a stage records a node of the pipeline's
graph and returns a :class:`StageRef` standing for its output.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from ..errors import ConfigError, UsageError
from ..names import check_name
from ..pickled import PickledOnce, Sealed

if TYPE_CHECKING:
    from .trace import Trace

__all__ = ["Stage", "StageOptions", "stage", "TRIGGERS", "current_trace"]

TRIGGERS = ("all_success", "all_done", "one_failed")  # when a stage runs, by how its inputs' stages ended

_tracing: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("airflowless_trace", default=None)


def current_trace() -> Trace | None:
    """The :class:`~.trace.Trace` recording stage calls now (a pipeline function being traced), or None.

    Kept here, beside the stage calls it redirects, so that this module needs nothing of :mod:`.trace`,
    which sets it (:func:`.trace.tracing`)."""
    return _tracing.get()


@dataclass(frozen=True, kw_only=True)
class StageOptions:
    """How a stage runs.

    ``retries``: extra attempts after a failure, waiting ``retry_delay`` seconds,
    multiplied by ``backoff`` each time (capped at ``max_retry_delay``).
    ``timeout``: seconds an attempt may take. ``resources``: Dask worker
    resources the stage's task needs (e.g. ``{"GPU": 1}``). ``cache``: reuse the
    output of an earlier run with the same code and inputs; set it to ``False``
    for a stage whose effect is outside its return value (it serves, it writes to
    an external system) and cannot be checked. ``cache_valid``: a function given
    the cached output, asked before it is reused; ``False`` runs the stage again
    (e.g. "does the URL it returned still answer?"). ``cache_ttl``: seconds (or a
    ``timedelta``) an output may be reused for; older ones are computed again.
    ``cache_key``: a function of the stage's arguments whose result keys the
    cache instead of the arguments (:mod:`airflowless.dag.cache`): leave out an
    argument the output does not depend on, such as a folder the stage writes
    to (its files change with each run, so it would never be reused). Path
    arguments are otherwise keyed by the files under them. ``version``: bump it to
    invalidate the cache when code the stage calls (not its own body) changes.
    ``trigger``: when the stage runs, by how the stages it reads ended (as Airflow's
    trigger rules): ``"all_success"`` (the default: each succeeded), ``"all_done"``
    (each ended, whatever happened: clean-up, releasing a lock, a report), or
    ``"one_failed"`` (at least one failed: an alert). A stage that runs although an
    input did not succeed gets ``None`` for that input; one whose rule is not met is
    skipped. Such a stage is never reused from the cache: it is about this run.
    ``max_width``: the most items ``stage.map(...)`` may get (an error beyond);
    ``concurrency``: the most of its items' runs at once (None: as the cluster allows).
    """

    retries: int = 0
    retry_delay: float = 1.0
    backoff: float = 2.0
    max_retry_delay: float = 60.0
    timeout: float | None = None
    resources: dict[str, float] = field(default_factory=dict)
    cache: bool = True
    cache_valid: Callable[[Any], bool] | None = None
    cache_ttl: float | timedelta | None = None
    cache_key: Callable[..., Any] | None = None
    version: str = ""
    trigger: str = "all_success"
    max_width: int = 10_000
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_width, int) or self.max_width < 0:
            raise ConfigError(f"max_width must be an integer >= 0 (the most items a .map may get), got {self.max_width!r}")
        if self.concurrency is not None and (not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise ConfigError(f"concurrency must be an integer >= 1 or None, got {self.concurrency!r}")
        if self.trigger not in TRIGGERS:
            raise ConfigError(f"trigger must be one of {', '.join(TRIGGERS)}, got {self.trigger!r}")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigError(f"retries must be an integer >= 0, got {self.retries!r}")
        for name in ("retry_delay", "max_retry_delay"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        if self.backoff < 1:
            raise ConfigError(f"backoff must be >= 1 (a multiplier), got {self.backoff!r}")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(f"timeout must be a positive number of seconds or None, got {self.timeout!r}")
        if not isinstance(self.cache, bool):
            raise ConfigError(f"cache must be True or False, got {self.cache!r}")
        if self.cache_valid is not None and not callable(self.cache_valid):
            raise ConfigError(
                f"cache_valid must be a function of the cached output returning True or False, got {self.cache_valid!r}")
        if self.cache_key is not None and not callable(self.cache_key):
            raise ConfigError(f"cache_key must be a function of the stage's arguments, got {self.cache_key!r}")
        ttl = self.cache_ttl
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float, timedelta))
                                or (self.cache_ttl_s or 0) <= 0):
            raise ConfigError(f"cache_ttl must be a positive number of seconds or a timedelta, got {self.cache_ttl!r}")
        for key, amount in self.resources.items():
            if not isinstance(key, str) or not isinstance(amount, (int, float)) or amount < 0:
                raise ConfigError(
                    f"resources map names to non-negative amounts, e.g. {{'GPU': 1}}; got {self.resources!r}"
                )

    @property
    def cache_ttl_s(self) -> float | None:
        """``cache_ttl`` in seconds."""
        ttl = self.cache_ttl
        return ttl.total_seconds() if isinstance(ttl, timedelta) else None if ttl is None else float(ttl)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1 = the first retry)."""
        return float(min(self.max_retry_delay, self.retry_delay * self.backoff ** (attempt - 1)))


def _code_fingerprint(fn: Callable[..., Any]) -> str:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        source = repr((code.co_code, code.co_consts)) if code is not None else repr(fn)
    return hashlib.sha256(source.encode()).hexdigest()


class Stage:
    """A function that is one node of a pipeline graph. Build with :func:`stage`."""

    def __init__(self, fn: Callable[..., Any], options: StageOptions, name: str | None = None) -> None:
        if not callable(fn):
            raise UsageError(f"@stage decorates a function, got {fn!r}")
        self._fn: Callable[..., Any] | Sealed = fn
        self.options = options
        self.name = check_name("@stage(name=...)", fn.__name__ if name is None else name)
        self.signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    @property
    def fn(self) -> Callable[..., Any]:
        """The user's function (opened here, on first use, when it came sealed: see :meth:`__getstate__`)."""
        fn = self._fn
        if isinstance(fn, Sealed):
            fn = self._fn = fn.open()
            self.__wrapped__ = fn
        return fn

    @functools.cached_property
    def code_hash(self) -> str:
        """Fingerprint of the stage's source and version: part of every cache key."""
        return hashlib.sha256(
            f"{self.name}\0{_code_fingerprint(self.fn)}\0{self.options.version}".encode()
        ).hexdigest()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        trace = current_trace()
        if trace is None:
            return self.fn(*args, **kwargs)
        return trace.add(self, args, kwargs)

    def map(self, over: Any, *args: Any, **kwargs: Any) -> Any:
        """``self(item, *args, **kwargs)`` for each item of ``over``: their outputs, as a list.

        In a pipeline, ``over`` may be the output of a stage (known when the run
        gets there) or a list; each item is one run of the stage in the record
        (``score[3]``), cached, retried and resumed on its own. Outside a
        pipeline it is a plain loop.

        >>> @stage
        ... def square(x: int, plus: int = 0) -> int:
        ...     return x * x + plus
        >>> square.map([1, 2, 3], plus=1)
        [2, 5, 10]
        """
        trace = current_trace()
        if trace is None:
            return [self.fn(item, *args, **kwargs) for item in over]
        return trace.add_mapped(self, over, args, kwargs)

    def options_with(self, **changes: Any) -> Stage:
        """A copy of this stage with some options changed."""
        merged = {**self.options.__dict__, **changes}
        return Stage(self.fn, StageOptions(**merged), self.name)

    def __repr__(self) -> str:
        return f"<stage {self.name}{self.signature}>"

    def __getstate__(self) -> dict[str, Any]:
        """The function goes as bytes pickled once here (:class:`~airflowless.pickled.Sealed`): the
        scheduler copies them unopened, so a traceback on the worker names the user's file."""
        state = dict(self.__dict__)
        state.pop("code_hash", None)
        state.pop("__wrapped__", None)
        state.pop("_sealed_fn", None)
        if state.pop("_sealing", False):  # inside its own sealing (the function's globals name the stage):
            return state  # the function as it is, which that pickle already holds
        state["_fn"] = self._sealed()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "fn" in state:  # pickled before stages sealed their function
            state["_fn"] = state.pop("fn")
        self.__dict__.update(state)

    def _sealed(self) -> Sealed:
        if isinstance(self._fn, Sealed):
            return self._fn
        sealed = self.__dict__.get("_sealed_fn")
        if sealed is None:
            self.__dict__["_sealing"] = True
            try:
                sealed = self.__dict__["_sealed_fn"] = PickledOnce(self._fn).sealed()
            finally:
                self.__dict__.pop("_sealing", None)
        return sealed

    def reseal(self) -> None:
        """Pickle the function afresh at its next send: a run starts (a notebook may have changed what the
        function reads since the last one); within a run, every call of the stage carries the same bytes."""
        self.__dict__.pop("_sealed_fn", None)


@overload
def stage(fn: Callable[..., Any], /) -> Stage: ...
@overload
def stage(*, name: str | None = None, **options: Any) -> Callable[[Callable[..., Any]], Stage]: ...


def stage(fn: Callable[..., Any] | None = None, /, *, name: str | None = None, **options: Any) -> Any:
    """Make a function a pipeline stage: ``@stage`` or ``@stage(retries=2, timeout=60, ...)``.

    Options are those of :class:`StageOptions`.
    """
    unknown = set(options) - set(StageOptions.__dataclass_fields__)
    if unknown:
        raise ConfigError(
            f"@stage got unknown option(s) {sorted(unknown)}; "
            f"known: {sorted(StageOptions.__dataclass_fields__)}"
        )
    opts = StageOptions(**options)
    if fn is not None:
        return Stage(fn, opts, name)
    return lambda f: Stage(f, opts, name)
