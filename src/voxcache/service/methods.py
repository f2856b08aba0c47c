"""405 for a method a route does not take, with every method it does take in ``Allow``.

Starlette let ``GET /v1/audio/{key}`` swallow ``GET /v1/audio/speech`` (a 404) and named
only the first matching route's methods (``PUT /tts`` said ``Allow: GET``). Here a path that
is some route's literal path belongs to the routes written with it (``MethodCheck``, one
dictionary lookup), and every 405 names the methods of every route whose path matches.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_body


class MethodCheck:
    """Pure ASGI middleware in front of the router: a literal path's own methods only."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._literal: dict[str, frozenset[str]] | None = None

    def _paths(self, scope: Scope) -> dict[str, frozenset[str]]:
        """The literal paths, read once: at startup (or at the first request, for a server
        that sends no lifespan events)."""
        if self._literal is None:
            self._literal = literal_paths(scope["app"].routes)
        return self._literal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self._paths(scope)
        elif scope["type"] == "http":
            methods = self._paths(scope).get(scope["path"])
            if methods is not None and scope["method"] not in methods:
                await not_allowed(scope["method"], scope["path"], methods, send)
                return
        await self.app(scope, receive, send)


def _http_routes(routes: list[Any]) -> list[Any]:
    """Every HTTP route of the app, included routers flattened (FastAPI keeps them nested)."""
    return [route for route in iter_route_contexts(routes) if route.methods]


def literal_paths(routes: list[Any]) -> dict[str, frozenset[str]]:
    """Path → methods of the routes written without parameters."""
    found: dict[str, set[str]] = {}
    for route in _http_routes(routes):
        if not route.param_convertors:
            found.setdefault(route.path, set()).update(route.methods)
    return {path: frozenset(methods) for path, methods in found.items()}


def allowed(routes: list[Any], scope: Scope) -> frozenset[str]:
    """The methods of every route whose path matches the request's (a literal path: its
    own routes' only)."""
    literal = literal_paths(routes).get(scope["path"])
    if literal is not None:
        return literal
    methods: set[str] = set()
    for route in _http_routes(routes):
        if route.path_regex.match(scope["path"]):
            methods.update(route.methods)
    return frozenset(methods)


def allow_header(methods: frozenset[str]) -> str:
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    """Answer the router's own 405s with every method the path takes, and check literal
    paths before the router sees them."""

    async def on_405(request: Request, _exc: Exception) -> JSONResponse:
        methods = allowed(request.app.routes, request.scope)
        return JSONResponse(_body(request.method, request.url.path, methods), status_code=405,
                            headers={"Allow": allow_header(methods)})

    app.add_exception_handler(405, on_405)
    app.add_middleware(MethodCheck)


def _body(method: str, path: str, methods: frozenset[str]) -> dict[str, object]:
    return error_body(f"{path} does not take {method}; it takes {allow_header(methods)}",
                      "invalid_request_error", code="method_not_allowed")


async def not_allowed(method: str, path: str, methods: frozenset[str], send: Send) -> None:
    body = json.dumps(_body(method, path, methods)).encode()
    await send({"type": "http.response.start", "status": 405, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"allow", allow_header(methods).encode())]})
    await send({"type": "http.response.body", "body": body})
