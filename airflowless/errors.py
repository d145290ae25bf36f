"""The one exception hierarchy of airflowless.

Every error a user can cause subclasses :class:`AirflowlessError` and also
``ValueError`` or ``TypeError``, so ordinary ``except ValueError`` still works.
Messages say what was expected, what was got, and what to do.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AirflowlessError",
    "ConfigError",
    "PipelineDefinitionError",
    "PipelineLoadError",
    "ParameterError",
    "StageFailedError",
    "StageTimeoutError",
    "Skip",
    "StageSkipped",
    "PipelineRunError",
    "StoreError",
    "ClusterError",
    "CheckpointPathError",
    "RankFailedError",
    "TrainingFailedError",
    "TrainingDataError",
    "TrialsErroredError",
    "SignatureError",
    "StageOutputError",
    "UsageError",
    "ClusterLostError",
    "NonFiniteValueError",
    "ResumeError",
    "RunCancelled",
]


class AirflowlessError(Exception):
    """Base of every airflowless error."""


class ConfigError(AirflowlessError, ValueError):
    """A setting or option has a value airflowless cannot use."""


class UsageError(AirflowlessError, TypeError):
    """A call airflowless cannot take: an argument of the wrong kind (a dict where a function was expected),
    or an object used in a way it does not support."""


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


class Skip(AirflowlessError):
    """Raised in a stage to skip it, and the stages that need its output: ``raise Skip("no new rows today")``.

    The stage is recorded ``skipped`` with the reason; the run does not fail for it. Stages with
    ``trigger="all_done"`` downstream still run (they get ``None`` for its output).
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason)


class StageSkipped(AirflowlessError):
    """What a stage's task raises when the stage raised :class:`Skip` (the driver records a skip, not a failure)."""

    def __init__(self, stage: str, reason: str) -> None:
        self.stage = stage
        self.reason = reason
        super().__init__(f"stage {stage!r} skipped itself: {reason or 'no reason given'}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.stage, self.reason))


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


class SignatureError(AirflowlessError, ValueError):
    """A file airflowless pickled (a stage output, Tune state) is not signed with this installation's key.

    airflowless refuses to unpickle it: someone modified it, or another
    installation (another signing key) wrote it.
    """

    def __init__(self, path: str, reason: str, advice: str) -> None:
        self.path = path
        self.reason = reason
        self.advice = advice
        super().__init__(
            f"refusing to load {path}: expected a file signed with this installation's key, "
            f"but {reason}; it was modified, or written by someone else (another signing key). "
            f"{advice}"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.path, self.reason, self.advice))


class CheckpointPathError(AirflowlessError, ValueError):
    """A file of a checkpoint would be written outside the folder it is copied into."""

    def __init__(self, checkpoint: str, key: str, target: str) -> None:
        self.checkpoint = checkpoint
        self.key = key
        self.target = target
        super().__init__(
            f"checkpoint {checkpoint!r} holds a file {key!r} that would be written outside {target!r}; "
            "expected every file of a checkpoint to lie under its folder. Nothing was written there: "
            "remove that file from the checkpoint's storage, or do not load a checkpoint from a storage "
            "that others can write"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.checkpoint, self.key, self.target))


class RankFailedError(AirflowlessError, RuntimeError):
    """A training rank raised, or its worker was lost."""


class TrainingFailedError(RankFailedError):
    """Training failed more often than ``FailureConfig.max_failures`` allows.

    ``result`` is the run's :class:`~airflowless.train.Result` (metrics and
    checkpoints saved before the failure), as Ray's ``TrainingFailedError``.
    """

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result  # pickled with the exception's state (the result refers back to it)


class TrialsErroredError(AirflowlessError, RuntimeError):
    """A Tuner's fit ended with more errored trials than it accepts; ``result_grid`` holds every trial's result."""

    def __init__(self, message: str, result_grid: Any = None) -> None:
        self.result_grid = result_grid
        super().__init__(message)


class TrainingDataError(AirflowlessError, ValueError):
    """A trainer's dataset cannot be trained on: too few rows for its ranks, or a missing column."""


class ClusterLostError(ClusterError):
    """The cluster went away (its scheduler died or became unreachable) while a run was on it.

    ``run_id`` is the pipeline run's; a Tuner's experiment gives ``experiment``
    and its ``path`` instead (``run_id`` 0), and ``unfinished`` names its
    interrupted trials.
    """

    def __init__(self, run_id: int, address: str, unfinished: list[str], experiment: str | None = None,
                 path: str | None = None) -> None:
        self.run_id = run_id
        self.address = address
        self.unfinished = unfinished
        self.experiment, self.path = experiment, path
        if experiment is not None:
            message = (f"the cluster at {address} went away during experiment {experiment!r}"
                       + (f" (trials {unfinished} were interrupted; their checkpoints are kept)" if unfinished else "")
                       + f"; start a cluster and continue with Tuner.restore({path!r}).fit()")
        else:
            message = (f"the cluster at {address} went away during run {run_id}"
                       + (f" (unfinished stages {unfinished} were recorded as failed or skipped)" if unfinished else "")
                       + f"; start a cluster and resume the run with --resume {run_id}")
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return (type(self), (self.run_id, self.address, self.unfinished, self.experiment, self.path))


class NonFiniteValueError(AirflowlessError, ValueError):
    """A value to be recorded holds NaN or infinity, which the record (JSON) cannot keep."""

    def __init__(self, what: str, path: str, value: object) -> None:
        self.what = what
        self.path = path
        super().__init__(
            f"{what} {path!r} is {value!r}; the record keeps {what}s as JSON, which has no NaN "
            "or infinity; pass a finite number (or none for an optional parameter)"
        )


class ResumeError(AirflowlessError, ValueError):
    """A run cannot be resumed now: its driver is alive, or another process is resuming it."""


class RunCancelled(KeyboardInterrupt):
    """The driver got SIGINT or SIGTERM; the run was recorded as ``cancelled``.

    A ``KeyboardInterrupt`` so that code catching ``Exception`` lets it through.
    ``signum`` is the signal; ``run_id`` the run, once it is known; ``reason`` says
    who cancelled it when it was not a signal (a control-plane request: ``signum``
    is then SIGTERM's, for the exit code).
    """

    def __init__(self, signum: int, run_id: int | None = None, *, reason: str | None = None) -> None:
        self.signum = signum
        self.run_id = run_id
        self.reason = reason
        super().__init__(signum, run_id)

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum


class StageOutputError(AirflowlessError, TypeError):
    """A stage returned a value that cannot be kept as its output (e.g. it holds Dask futures)."""
