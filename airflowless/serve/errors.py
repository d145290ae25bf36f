"""Errors raised by airflowless.serve; each says what was expected, what was got, what to do."""

from __future__ import annotations

from ..errors import AirflowlessError

__all__ = ["ServeError", "BadRequestError", "BackPressureError", "ReplicaDiedError", "DeploymentNotFoundError",
           "UnavailableError", "ReplicaStuckError"]


class ServeError(AirflowlessError, RuntimeError):
    """A deployment cannot be started, reached or asked for what was requested."""


class BadRequestError(AirflowlessError, ValueError):
    """The request's body is not what the deployment accepts; the proxy answers HTTP 400.

    Raise it from deployment code to reject an input with a message for the caller:

    >>> raise BadRequestError("expected a JSON object with 'text', got a list")  # doctest: +SKIP
    """


class BackPressureError(ServeError):
    """Every replica is at ``max_ongoing_requests`` and the queue is full; the proxy answers 503."""

    def __init__(self, deployment: str, max_ongoing: int, max_queued: int) -> None:
        self.deployment, self.max_ongoing, self.max_queued = deployment, max_ongoing, max_queued
        super().__init__(
            f"deployment {deployment!r} is overloaded: every replica has {max_ongoing} ongoing "
            f"requests and {max_queued} more are queued; retry later, or raise num_replicas, "
            "max_ongoing_requests or max_queued_requests"
        )

    def __reduce__(self) -> tuple[type, tuple[str, int, int]]:
        return (type(self), (self.deployment, self.max_ongoing, self.max_queued))


class UnavailableError(ServeError):
    """The deployment has no replica for now and says why (it waits for capacity); the proxy answers 503."""

    def __init__(self, deployment: str, reason: str) -> None:
        self.deployment, self.reason = deployment, reason
        super().__init__(f"deployment {deployment!r} has no running replica: {reason}; retry later")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.deployment, self.reason))


class ReplicaDiedError(ServeError):
    """The replica serving a request died while the request was running on it."""


class ReplicaStuckError(ServeError):
    """A replica's thread still runs a call whose caller left; the controller replaces the replica."""


class DeploymentNotFoundError(AirflowlessError, KeyError):
    """No application or deployment of that name is running."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
