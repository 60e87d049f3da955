"""Every failure becomes a JSON answer with a code and a message; dependencies map to 503."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.embedding.errors import (
    ImageTooLarge,
    InvalidImage,
    ModelVersionUnavailable,
    TritonQueueFull,
    TritonQueueTimeout,
    TritonTimeout,
    TritonUnavailable,
)

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "timeout",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
    503: "unavailable",
}


class ApiError(Exception):
    """An answer other than 2xx, raised anywhere in a request."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or _HTTP_CODES.get(status, "error")
        self.headers = headers or {}


class Unavailable(ApiError):
    """A dependency (Triton, the vector store) failed or missed its deadline: try again soon."""

    def __init__(self, dependency: str, message: str, retry_after_s: int) -> None:
        super().__init__(
            503,
            message,
            code=f"{dependency}_unavailable",
            headers={"Retry-After": str(retry_after_s)},
        )
        self.dependency = dependency


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> Any:
    body: dict[str, Any] = {"error": code, "message": message}
    if details is not None:
        body["details"] = details
    return body


_NOT_AN_OBJECT = ("model_attributes_type", "dict_type", "model_type")
# A body of 400,000 unknown keys once got a 35 MB answer: the first few say what to fix.
MAX_DETAILS = 5
# Field names and values in `loc` come from the caller: no echo of a huge one either.
_MAX_LOC_PART = 64


def _loc_part(part: object) -> str | int:
    if isinstance(part, int):
        return part
    text = str(part)
    return text if len(text) <= _MAX_LOC_PART else text[:_MAX_LOC_PART] + "…"


def _validation_message(errors: list[dict[str, Any]], total: int) -> str:
    parts = []
    for error in errors:
        if list(error.get("loc", ())) == ["body"] and error.get("type") in _NOT_AN_OBJECT:
            parts.append("the body must be a JSON object, sent as Content-Type: application/json")
            continue
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "query"))
        parts.append(f"{where or 'request'}: {error.get('msg', 'invalid')}")
    if total > len(errors):
        parts.append(f"and {total - len(errors)} more errors")
    return "; ".join(parts)


def install_handlers(
    app: FastAPI, retry_after_s: int, overload_retry_after_s: int | None = None
) -> None:
    """Register the handlers that turn exceptions into JSON answers.

    `overload_retry_after_s`: the Retry-After of an overload (Triton's queue full, or a
    request still queued at its deadline): capacity frees within a second or so, unlike a
    dependency that is down (`retry_after_s`).
    """
    overload_after = str(overload_retry_after_s or retry_after_s)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.code, exc.message), status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        every = exc.errors()
        errors = [
            {
                "loc": [_loc_part(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg"))[:200],
                "type": e.get("type"),
            }
            for e in every[:MAX_DETAILS]
        ]
        body = error_body("invalid_request", _validation_message(errors, len(every)), errors)
        body["more_errors"] = len(every) - len(errors)
        return JSONResponse(body, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        return JSONResponse(
            error_body(code, str(exc.detail)),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(ImageTooLarge)
    async def _too_large(request: Request, exc: ImageTooLarge) -> JSONResponse:
        return JSONResponse(error_body("too_large", str(exc)), status_code=413)

    @app.exception_handler(InvalidImage)
    async def _bad_image(request: Request, exc: InvalidImage) -> JSONResponse:
        return JSONResponse(error_body("invalid_image", str(exc)), status_code=422)

    @app.exception_handler(TritonUnavailable)
    @app.exception_handler(TritonTimeout)
    @app.exception_handler(ModelVersionUnavailable)
    async def _triton(request: Request, exc: Exception) -> JSONResponse:
        log.warning("triton: %s", exc)
        return JSONResponse(
            error_body("triton_unavailable", f"the embedding model is unavailable: {exc}"),
            status_code=503,
            headers={"Retry-After": str(retry_after_s)},
        )

    @app.exception_handler(TritonQueueFull)
    @app.exception_handler(TritonQueueTimeout)
    async def _overloaded(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            error_body("overloaded", f"the embedding model is overloaded: {exc}"),
            status_code=503,
            headers={"Retry-After": overload_after},
        )

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        # A bug, not bad input: log the traceback, tell the caller nothing internal.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            error_body("internal", "internal error; it has been logged"), status_code=500
        )
