"""Plain Starlette routes on the FastAPI app: first on its router, named, documented, and
reached straight from the middleware (``HotRoutes``) when the request names them exactly.

The two hot routes (a speech hit, a stored take) are ASGI endpoints rather than FastAPI
path operations: no dependency injection, no pydantic, no response classes on a hit.
This module gives them what a FastAPI route has: the route in ``scope["route"]`` (the error
handler counts a refusal under its name) and an entry in ``/openapi.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .methods import literal_paths

if TYPE_CHECKING:
    from .options import ServiceOptions
    from .serving import Server
    from .speech_memo import SpeechMemo


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


Target = tuple[PlainRoute, ASGIApp]


def handlers_of(app: Any) -> dict[Any, Any]:
    """The app's exception handlers that Starlette's ``ExceptionMiddleware`` runs (500 and
    ``Exception`` are ``ServerErrorMiddleware``'s, outermost, for every route alike)."""
    return {key: value for key, value in app.exception_handlers.items()
            if key not in (500, Exception)}


@dataclass(frozen=True, slots=True)
class AppParts:
    """What a plain endpoint reads of its app on every request."""

    app: Any
    options: ServiceOptions
    server: Server
    memo: SpeechMemo
    handlers: dict[Any, Any]
    """The app's exception handlers (``handlers_of``)."""


class PlainEndpoint:
    """Base of the plain endpoints: their app's parts, read from ``app.state`` once per app
    (each attribute of Starlette's ``State`` is a Python-level lookup)."""

    _parts: AppParts | None = None

    def parts(self, app: Any) -> AppParts:
        """``app``'s parts (read again only when another app calls this endpoint)."""
        parts = self._parts
        if parts is None or parts.app is not app:
            state = app.state
            parts = self._parts = AppParts(app, state.options, state.server,
                                           state.speech_memo, handlers_of(app))
        return parts


async def refusing(handlers: dict[Any, Any], endpoint: ASGIApp, scope: Scope,
                   receive: Receive, send: Send) -> None:
    """Run a plain endpoint's answer that may refuse inside Starlette's own
    ``ExceptionMiddleware`` with the app's handlers: the same error shapes and counts as
    any route, whether the router or ``HotRoutes`` brought the request. A hit that cannot
    refuse is sent before, without it."""
    await ExceptionMiddleware(endpoint, handlers)(scope, receive, send)


class HotRoutes:
    """Pure ASGI middleware, innermost: a request naming a plain route exactly goes to its
    endpoint (which refuses through the app's handlers itself: ``refusing``), past
    ``MethodCheck``, FastAPI's exception layer and exit stack and the router's scan, none
    of which such a request needs. Exactly: its method and literal
    path (``POST /v1/audio/speech``), or for a path ending in one parameter
    (``/v1/audio/{key}``) its prefix and one segment that is no route's literal path.
    Anything else takes the router to the same endpoints."""

    def __init__(self, app: ASGIApp, owner: FastAPI) -> None:
        self.app = app
        self.owner = owner
        self._exact: dict[tuple[str, str], Target] = {}
        self._prefixed: dict[tuple[str, str], tuple[str, Target]] = {}
        self._literal: frozenset[str] = frozenset()
        self._built = False

    def _build(self) -> None:
        """Read the routes once, at startup (all are installed by then; FastAPI then builds
        and keeps its route contexts, ~60 ms of the event loop, that the first request paid)."""
        for route in self.owner.router.routes:
            if not isinstance(route, PlainRoute):
                continue
            target = (route, route.app)
            params = list(route.param_convertors)
            for method in route.methods or ():
                if not params:
                    self._exact[method, route.path] = target
                elif len(params) == 1 and route.path.endswith("{" + params[0] + "}") \
                        and route.param_convertors[params[0]].regex == "[^/]+":
                    prefix = route.path[:-len(params[0]) - 2]
                    self._prefixed[method, prefix] = (params[0], target)
        self._literal = frozenset(literal_paths(self.owner.routes))
        self._built = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._built and scope["type"] in ("lifespan", "http"):  # lifespan: startup
            self._build()
        if scope["type"] == "http" and not scope.get("root_path"):
            method, path = scope["method"], scope["path"]
            target = self._exact.get((method, path))
            if target is not None:
                scope["route"], scope["path_params"] = target[0], {}
                await target[1](scope, receive, send)
                return
            cut = path.rfind("/") + 1
            found = self._prefixed.get((method, path[:cut]))
            if found is not None and cut < len(path) and path not in self._literal:
                name, (route, endpoint) = found
                scope["route"], scope["path_params"] = route, {name: path[cut:]}
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)
