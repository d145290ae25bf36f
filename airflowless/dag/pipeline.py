"""Pipelines: a function that wires stages, run on the cluster by calling it.

>>> from airflowless import pipeline, stage
>>> @stage
... def double(x: int) -> int:
...     return 2 * x
>>> @pipeline
... def demo(n: int = 3):
...     return double(double(n))
>>> demo.graph().nodes.keys()
dict_keys(['double', 'double-2'])
>>> demo(n=2).value          # runs on the cluster (airflowless.init() if needed)  # doctest: +SKIP
8
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ParameterError, PipelineDefinitionError, ResumeError, Skip
from ..jsonsafe import require_finite
from ..store.records import RunStatus
from .graph import Graph
from .params import Param, bind_params, params_of
from .trace import tracing

if TYPE_CHECKING:
    from distributed import Client

    from ..store import Store
    from .result import RunResult

__all__ = ["Pipeline", "pipeline"]


class Pipeline:
    """A traced, runnable pipeline. Build with :func:`pipeline`."""

    def __init__(self, fn: Any, name: str | None = None, timeout: float | None = None) -> None:
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
            raise ConfigError(f"@pipeline(timeout=...) is a positive number of seconds or None, got {timeout!r}")
        self.fn = fn
        self.name = name or fn.__name__
        self.timeout = timeout  # seconds a run may take; then it is stopped and recorded timed_out
        self.params: dict[str, Param] = params_of(fn)
        functools.update_wrapper(self, fn)

    @property
    def module(self) -> str:
        file = inspect.getsourcefile(self.fn) or ""
        return f"{self.fn.__module__}:{file}" if file else self.fn.__module__

    def graph(self, **params: Any) -> Graph:
        """Trace the pipeline with ``params`` (defaults filled in) and validate the graph."""
        bound = bind_params(self.name, self.params, params)
        require_finite(bound, what="parameter")  # the record keeps them as JSON
        with tracing(self.name) as trace:
            try:
                returned = self.fn(**bound)
            except PipelineDefinitionError:
                raise
            except Skip as skip:
                raise PipelineDefinitionError(
                    f"pipeline {self.name!r} raised airflowless.Skip({skip.reason!r}) while its stages were being "
                    "wired; Skip skips one stage: raise it inside a @stage function") from None
            except Exception as exc:
                raise PipelineDefinitionError(
                    f"pipeline {self.name!r} raised while its stages were being wired: "
                    f"{type(exc).__name__}: {exc}. A pipeline function only calls stages; "
                    "do the work inside a stage"
                ) from exc
        trace.graph.result = returned
        trace.graph.validate()
        return trace.graph

    def run(
        self, params: dict[str, Any] | None = None, *, client: Client | None = None,
        address: str | None = None, store: Store | str | None = None, storage: str | None = None,
        cache: bool = True, resume: int | None = None, raise_on_failure: bool = True,
        progress: Callable[[str, str], None] | None = None, queued_run: int | None = None,
    ) -> RunResult:
        """Run on the cluster and record the run; see :func:`airflowless.dag.runner.execute`.

        ``resume``: the id of an earlier run of this pipeline; its finished stages
        are reused and the rest run again, with that run's parameters.
        ``cache=False`` runs every stage even when an earlier output matches.
        ``progress(node, what)`` hears each stage start, retry, succeed or fail as it happens.
        """
        from ..runtime import init
        from ..settings import get_settings
        from ..store import open_store
        from .runner import execute

        db = store if store is not None and not isinstance(store, str) else open_store(store)
        given = dict(params or {})
        if resume is not None:
            given = self.resume_params(db, resume, given)
        bound = bind_params(self.name, self.params, given)
        graph = self.graph(**bound)
        client = client or init(address, quiet=True)
        return execute(
            graph, module=self.module, params=bound, client=client, store=db,
            storage=storage or get_settings().storage, use_cache=cache, resume_from=resume,
            raise_on_failure=raise_on_failure, progress=progress, timeout=self.timeout, queued_run=queued_run,
        )

    def resume_params(self, store: Store, run_id: int, given: dict[str, Any]) -> dict[str, Any]:
        """The parameters to resume run ``run_id`` with, checked before anything starts.

        :class:`KeyError` if there is no such run; :class:`ParameterError` if it is
        another pipeline's run or ``given`` differs from its parameters;
        :class:`~airflowless.errors.ResumeError` if it cannot be resumed now (its
        driver is alive, another live run is resuming it, or it succeeded).
        """
        earlier = store.get_run(run_id)
        if earlier.pipeline != self.name:
            raise ParameterError(
                f"run {run_id} is a run of pipeline {earlier.pipeline!r}, not {self.name!r}; "
                "resume it with that pipeline"
            )
        changed = {k: v for k, v in given.items() if earlier.params.get(k) != v}
        if changed:
            raise ParameterError(
                f"a resumed run keeps the parameters of run {run_id} ({earlier.params}); "
                f"got different values for {sorted(changed)} — start a new run instead"
            )
        blocker = store.resume_blocker(run_id)
        if blocker is not None:
            raise ResumeError(f"cannot resume: {blocker}")
        if earlier.status == RunStatus.SUCCEEDED:
            raise ResumeError(
                f"run {run_id} succeeded: there is nothing to resume; run the pipeline again instead "
                "(its stages whose code and inputs are unchanged are reused from the cache)")
        return dict(earlier.params)

    def resume(self, run_id: int, **options: Any) -> RunResult:
        """Run again what failed or never ran in run ``run_id``, reusing what finished."""
        return self.run(resume=run_id, **options)

    def deploy(self, name: str, *, params: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
        """Record a deployment of this pipeline for the service (``cron=``, ``timezone_name=``, ``every=``,
        ``max_active_runs=``...: see :func:`airflowless.service.deploy.deploy`); the deployment as stored."""
        from ..service.deploy import deploy

        return deploy(self, name, params=params, **options)

    def submit(self, params: dict[str, Any] | None = None, **options: Any) -> int:
        """Queue one run for the service, which runs it without this process; its run id."""
        from ..service.deploy import submit

        return submit(self, params=params, **options)

    def __call__(self, *args: Any, **kwargs: Any) -> RunResult:
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise ParameterError(f"pipeline {self.name!r}: {exc}") from None
        return self.run(dict(bound.arguments))

    def __repr__(self) -> str:
        return f"<pipeline {self.name}{inspect.signature(self.fn)}>"


def pipeline(fn: Any = None, /, *, name: str | None = None, timeout: float | None = None) -> Any:
    """Make a function a pipeline: ``@pipeline`` or ``@pipeline(name="taxi", timeout=3600)``.

    ``timeout``: seconds a run may take. Past it the stages still running are
    stopped (recorded ``cancelled``), what needs them is skipped, stages with
    ``trigger="all_done"`` or ``"one_failed"`` still run, and the run ends ``timed_out``.
    """
    if fn is not None:
        return Pipeline(fn, name, timeout)
    return lambda f: Pipeline(f, name, timeout)
