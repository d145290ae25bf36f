"""The one exception hierarchy of airflowless.

Every error a user can cause subclasses :class:`AirflowlessError` and also
``ValueError`` or ``TypeError``, so ordinary ``except ValueError`` still works.
Messages say what was expected, what was got, and what to do.
"""

from __future__ import annotations

__all__ = [
    "AirflowlessError",
    "ConfigError",
    "PipelineDefinitionError",
    "PipelineLoadError",
    "ParameterError",
    "StageFailedError",
    "StageTimeoutError",
    "PipelineRunError",
    "StoreError",
    "ClusterError",
]


class AirflowlessError(Exception):
    """Base of every airflowless error."""


class ConfigError(AirflowlessError, ValueError):
    """A setting or option has a value airflowless cannot use."""


class PipelineDefinitionError(AirflowlessError, ValueError):
    """A pipeline's graph is not valid: a cycle, an unknown reference, a bad stage call."""


class PipelineLoadError(AirflowlessError, ValueError):
    """A pipeline module or name could not be loaded."""


class ParameterError(AirflowlessError, ValueError):
    """A pipeline parameter is missing, unknown, or cannot be parsed to its declared type."""


class StageFailedError(AirflowlessError, RuntimeError):
    """A stage raised; carries the stage name and the formatted remote traceback."""

    def __init__(self, stage: str, message: str, traceback: str = "") -> None:
        self.stage = stage
        self.message = message
        self.traceback = traceback
        super().__init__(f"stage {stage!r} failed: {message}")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.stage, self.message, self.traceback))


class StageTimeoutError(AirflowlessError, TimeoutError):
    """A stage ran longer than its ``timeout``."""

    def __init__(self, stage: str, timeout: float) -> None:
        self.stage = stage
        self.timeout = timeout
        super().__init__(
            f"stage {stage!r} ran longer than its timeout of {timeout:g} s; "
            "raise the timeout with @stage(timeout=...) or make the stage faster"
        )

    def __reduce__(self) -> tuple[type, tuple[str, float]]:
        return (type(self), (self.stage, self.timeout))


class PipelineRunError(AirflowlessError, RuntimeError):
    """A pipeline run finished with failed stages; the run record keeps the details."""

    def __init__(self, run_id: int, pipeline: str, failures: dict[str, str]) -> None:
        self.run_id = run_id
        self.pipeline = pipeline
        self.failures = failures
        lines = "\n\n".join(f"--- stage {name!r} ---\n{text}" for name, text in failures.items())
        super().__init__(
            f"run {run_id} of pipeline {pipeline!r} failed in stage(s) {sorted(failures)}; "
            f"fix the stage and resume with `airflowless run ... --resume {run_id}` "
            f"(or {pipeline}.resume({run_id})).\n{lines}"
        )

    def __reduce__(self) -> tuple[type, tuple[int, str, dict[str, str]]]:
        return (type(self), (self.run_id, self.pipeline, self.failures))


class StoreError(AirflowlessError, RuntimeError):
    """The record store cannot be opened or written."""


class ClusterError(AirflowlessError, RuntimeError):
    """The Dask cluster cannot be started, reached, or asked for what was requested."""
