"""Every error becomes one OpenAI-style JSON body: ``{"error": {"message", "type", ...}}``.

One table maps voxcache's error tree to HTTP statuses, so a route never picks a
status by hand and a new error class lands in exactly one place. Anything not in
the tree is a bug; it is logged with its traceback and answered 500 with a
message that says so rather than leaking internals.
"""

from __future__ import annotations

import logging

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


STATUS: list[tuple[type[BaseException], int, str]] = [
    # most specific first: the first matching row wins
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
    """The one error shape every route returns."""
    return {"error": {"message": message, "type": kind, **extra}}


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
            return JSONResponse(error_body(message, kind, code=type(exc).__name__),
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
        problems = "; ".join(_describe(err) for err in exc.errors()[:5])
        return _counted(request, JSONResponse(error_body(
            f"invalid request: {problems}", "invalid_request_error", code="ValidationError"),
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


def _describe(err: dict[str, object]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")  # type: ignore[union-attr]
    return f"{loc or 'body'}: {err.get('msg')}"
