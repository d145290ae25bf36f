"""Errors a control-plane endpoint answers with: an HTTP status and a message, never a traceback."""

from __future__ import annotations

__all__ = ["ApiError", "BadRequest", "Busy", "Conflict", "Forbidden", "NotFound", "TooLarge", "Unauthorized", "Unavailable",
           "Unprocessable"]


class ApiError(Exception):
    """An error the API reports as ``{"error": message}`` with ``status``."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class Unprocessable(ApiError):
    """Well-formed, but not what the target takes (a parameter the pipeline does not take, a bad schedule)."""

    status = 422


class TooLarge(ApiError):
    status = 413


class Unavailable(ApiError):
    """The action needs a live cluster (or driver) and there is none."""

    status = 503


class Busy(Unavailable):
    """Too much is asked at once (reads waiting for the record): answered 503 with ``Retry-After``."""

    retry_after_s = 1
