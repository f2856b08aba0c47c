"""Plain Starlette routes on the FastAPI app: first on its router, named, documented.

The two hot routes (a speech hit, a stored take) are ASGI endpoints rather than FastAPI
path operations: no dependency injection, no pydantic, no response classes on a hit.
They still go through the app's middleware, exception handlers and router, and this
module gives them what a FastAPI route has: the route in ``scope["route"]`` (the error
handler counts a refusal under its name) and an entry in ``/openapi.json``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Scope


class PlainRoute(Route):
    """A Starlette route that says which route matched, as FastAPI's own routes do."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


def mount_first(app: FastAPI, path: str, endpoint: ASGIApp, method: str, name: str,
                operation: dict[str, Any], schemas: dict[str, Any] | None = None) -> None:
    """Put ``endpoint`` first on the app's router (a hit matches it at once) and describe it
    in ``/openapi.json`` (``operation`` under ``path``, its body's ``schemas``)."""
    app.router.routes.insert(0, PlainRoute(path, endpoint, methods=[method], name=name))
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = build()
            spec["paths"].setdefault(path, {})[method.lower()] = operation
            spec.setdefault("components", {}).setdefault("schemas", {}).update(schemas or {})
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override
