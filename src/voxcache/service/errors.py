"""Every error becomes one OpenAI-style JSON body: ``{"error": {"message", "type", ...}}``.

One table maps voxcache's error tree to HTTP statuses, so a route never picks a
status by hand and a new error class lands in exactly one place. Anything not in
the tree is a bug; it is logged with its traceback and answered 500 with a
message that says so rather than leaking internals.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    BadReferenceAudio,
    CacheDirError,
    EngineError,
    InvalidParameter,
    MissingDependency,
    NotFound,
    Overloaded,
    RequestError,
    UnknownVoice,
    UnsupportedFeature,
    VoxcacheError,
)

log = logging.getLogger("voxcache.service")


class Unauthorized(RequestError):
    """No API key, or one no tenant owns."""

    status = 401


class Forbidden(RequestError):
    """A known key that may not do this (a tenant's key on an admin route)."""

    status = 403


class PayloadTooLarge(RequestError):
    """A body or upload over its configured limit."""

    status = 413


class VoiceClipDropped(RequestError):
    """A private voice's clip was not kept, so a take not already stored cannot be rendered."""

    status = 409


class FieldRefusal(RequestError):
    """A refusal in OpenAI's terms (the OpenAI-compatible route raises these): the body
    field at fault (``param``, None when no single one is) and OpenAI's ``code``."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


STATUS: list[tuple[type[BaseException], int, str]] = [
    # most specific first: the first matching row wins
    (FieldRefusal, 400, "invalid_request_error"),  # its own status (``FieldRefusal.status``)
    (Unauthorized, 401, "authentication_error"),
    (Forbidden, 403, "permission_error"),
    (PayloadTooLarge, 413, "invalid_request_error"),
    (VoiceClipDropped, 409, "invalid_request_error"),
    (UnknownVoice, 404, "not_found_error"),
    (NotFound, 404, "not_found_error"),
    (BadReferenceAudio, 400, "invalid_request_error"),
    (UnsupportedFeature, 400, "invalid_request_error"),
    (InvalidParameter, 400, "invalid_request_error"),
    (RequestError, 400, "invalid_request_error"),
    (Overloaded, 503, "overloaded_error"),
    (MissingDependency, 503, "server_error"),
    (CacheDirError, 503, "server_error"),
    (EngineError, 502, "engine_error"),
    (TimeoutError, 504, "timeout_error"),
    (VoxcacheError, 500, "server_error"),
]


def error_body(message: str, kind: str, **extra: object) -> dict[str, object]:
    """The one error shape every route returns: OpenAI's, ``param`` and ``code`` always
    present (null when they say nothing)."""
    return {"error": {"message": message, "type": kind, "param": None, "code": None, **extra}}


def error_response(exc: BaseException) -> JSONResponse:
    """Map ``exc`` through ``STATUS`` to its JSON response."""
    for cls, status, kind in STATUS:
        if isinstance(exc, cls):
            headers = {}
            if isinstance(exc, Overloaded):
                headers["Retry-After"] = str(max(1, round(exc.retry_after)))
            if isinstance(exc, Unauthorized):
                headers["WWW-Authenticate"] = "Bearer"
            message = str(exc) or "render timed out; try again later"
            fields: dict[str, object] = {"code": type(exc).__name__}
            if isinstance(exc, FieldRefusal):
                status, fields = exc.status, {"param": exc.param, "code": exc.code}
            return JSONResponse(error_body(message, kind, **fields),
                                status_code=status, headers=headers)
    log.exception("unexpected error", exc_info=exc)
    return JSONResponse(error_body("internal error; see the server log", "server_error"),
                        status_code=500)


def install(app: FastAPI) -> None:
    """Register the handlers that make every failure one of the shapes above."""

    async def on_voxcache(request: Request, exc: Exception) -> JSONResponse:
        return _counted(request, error_response(exc))

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        problems = "; ".join(_describe(err) for err in errors[:5])
        return _counted(request, JSONResponse(error_body(
            f"invalid request: {problems}", "invalid_request_error", **_blame(errors)),
            status_code=400))

    async def on_http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return JSONResponse(error_body(str(exc.detail), "invalid_request_error"),
                            status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(VoxcacheError, on_voxcache)
    app.add_exception_handler(TimeoutError, on_voxcache)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_voxcache)


def _counted(request: Request, response: JSONResponse) -> JSONResponse:
    """Count a refused request under its route (cache status ``ERROR``)."""
    server = getattr(request.app.state, "server", None)
    route = request.scope.get("route")
    if server is not None and route is not None:
        server.metrics.request(getattr(route, "name", "unknown"), "ERROR", response.status_code)
    return response


VALIDATION_CODES = {"missing": "missing_required_parameter",
                    "extra_forbidden": "unknown_parameter",
                    "string_too_long": "string_above_max_length",
                    "string_too_short": "string_below_min_length"}
"""pydantic's error types → OpenAI's ``code`` for the same refusal (anything else about
one field's value is ``invalid_value``, or ``invalid_type`` for a wrong JSON type)."""


def _blame(errors: Sequence[dict[str, Any]]) -> dict[str, object]:
    """``param`` (the body field at fault, when exactly one is) and OpenAI's ``code``."""
    fields = {_field_of(tuple(err.get("loc", ()))) for err in errors}
    if len(fields) != 1 or None in fields:
        return {"code": "ValidationError"}
    kinds = {str(err.get("type", "")) for err in errors}
    code = next((VALIDATION_CODES[k] for k in kinds if k in VALIDATION_CODES), None) or (
        "invalid_type" if all(k.endswith(("_type", "_parsing")) for k in kinds)
        else "invalid_value")
    return {"param": fields.pop(), "code": code}


def _field_of(loc: tuple[object, ...]) -> str | None:
    """The top-level body field an error is about (None: the body as a whole)."""
    return loc[1] if len(loc) > 1 and loc[0] == "body" and isinstance(loc[1], str) else None


def _describe(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
    return f"{loc or 'body'}: {err.get('msg')}"
