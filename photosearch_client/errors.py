"""The errors a call raises: the API's answer other than 2xx, or no answer at all."""

from __future__ import annotations

from typing import Any


class PhotoSearchError(Exception):
    """Any failure of a call to the API."""


class ApiError(PhotoSearchError):
    """The API answered with an error: its HTTP status, its stable code and its message.

    Attributes:
        status: the HTTP status (401, 404, 422, 429, 503...).
        code: the answer's `error`, a stable code to branch on (`invalid_request`, ...).
        message: what was wrong, for a person.
        details: a 422's first validation errors (`loc`, `msg`, `type`).
        retry_after_s: seconds to wait before trying again (429, 503), when the API said.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []
        self.retry_after_s = retry_after_s


class ApiUnreachable(PhotoSearchError):
    """No answer: the connection failed or the call ran past its timeout."""
