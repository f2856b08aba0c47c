"""Plumbing shared by the protocol-compatible routes (GPT-SoVITS ``/tts``, CosyVoice).

Those routes answer in *their* protocol's shapes — api_v2's ``{"message"}``
errors, CosyVoice's headerless PCM — but serve through the same path as every
other route: with the service app (``app.state.server``) a request goes
through admission control, metrics and the X-Cache headers of
``service.respond``; an app that only sets ``app.state.cached`` (a library
user mounting these routers on their own FastAPI app) gets
``CachedEngine.asynthesize`` directly.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse

from ...audio import Audio
from ...cached import CachedEngine
from ...engine import Engine
from ...errors import (
    CacheDirError,
    EngineError,
    MissingDependency,
    Overloaded,
    RequestError,
    UnsupportedFeature,
    VoxcacheError,
)
from ...request import SynthesisRequest
from ...vocabulary import Mode, cache_mode

DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Served:
    """A take ready to be delivered, and the headers that say how it was served."""

    wav: bytes
    audio: Audio
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Streamed:
    """A take on its way: its headers and first audio now, the rest as it is rendered.

    A miss (in gateway mode: the upstream still speaking) reaches the caller chunk by
    chunk, exactly as the leader's render publishes it; a joiner replays what exists
    and follows live; a hit is one chunk. If the render fails after the first chunk,
    ``rest`` raises and the response must be cut off, never ended cleanly, so the
    client can tell a torn take from a whole one (nothing of it is stored either).
    """

    first: Audio
    rest: AsyncIterator[Audio]
    headers: dict[str, str]

    async def chunks(self) -> AsyncIterator[Audio]:
        """Every chunk of the take, in order."""
        yield self.first
        async for chunk in self.rest:
            yield chunk


def engine_of(request: Request) -> Engine:
    """The engine the app serves (the upstream, in gateway mode)."""
    return _cached(request).engine


def _cached(request: Request) -> CachedEngine:
    state = request.app.state
    server = getattr(state, "server", None)
    cached: CachedEngine | None = (server.cached if server is not None
                                   else getattr(state, "cached", None))
    if cached is None:
        raise RuntimeError("mount these routes on an app whose state has 'server' or 'cached'")
    return cached


async def tenant_of(request: Request) -> str:
    """The caller's tenant: the service's API-key mapping when the app has one."""
    if getattr(request.app.state, "options", None) is None:
        return DEFAULT_TENANT
    from ..guard import tenant_of as service_tenant

    return await service_tenant(request)


async def serve(request: Request, core: SynthesisRequest, route: str) -> Served:
    """Find or render ``core`` through the app's serving path (``X-Cache-Mode`` honoured)."""
    server = getattr(request.app.state, "server", None)
    if server is None:
        if request.headers.get("x-cache-mode", Mode.USE) != Mode.USE:
            raise UnsupportedFeature("X-Cache-Mode needs the voxcache service app")
        result = await _cached(request).asynthesize(core)
        headers = {"X-Cache": result.cache.header, "X-Cache-Tier": result.tier,
                   "X-Cache-Key": result.key, "ETag": f'"{result.key}"'}
        if result.reason:
            headers["X-Cache-Reason"] = result.reason
        return Served(result.wav, result.audio, headers)
    from ...formats import lookup
    from ..respond import cache_headers

    mode = cache_mode(request.headers.get("x-cache-mode"))
    started = time.perf_counter()
    core = _with_caller(request, core)
    resolved, key = await server.resolve(core)
    take = await server.take(resolved, key, mode, request=core)
    server.metrics.first_audio(take.cache.header, time.perf_counter() - started)
    server.metrics.request(route, take.cache.header, 200)
    return Served(take.entry.blob, take.entry.audio(), cache_headers(take, lookup("wav")))


async def serve_streamed(request: Request, core: SynthesisRequest, route: str) -> Streamed:
    """Like ``serve``, but a miss is handed over as it renders (see ``Streamed``).

    Waits for the first chunk, so a refusal or an engine failure before any audio is
    still raised here, while a proper error status can be sent.
    """
    server = getattr(request.app.state, "server", None)
    if server is None:
        served = await serve(request, core, route)
        return Streamed(served.audio, _nothing(), served.headers)
    from ...formats import lookup
    from ..respond import cache_headers

    mode = cache_mode(request.headers.get("x-cache-mode"))
    started = time.perf_counter()
    core = _with_caller(request, core)
    resolved, key = await server.resolve(core)
    take = await server.take(resolved, key, mode, stream=True, request=core)
    chunks = take.chunks(server.timeout)
    first = await anext(chunks)
    server.metrics.first_audio(take.cache.header, time.perf_counter() - started)
    server.metrics.request(route, take.cache.header, 200)
    return Streamed(first, chunks, cache_headers(take, lookup("wav")))


def _with_caller(request: Request, core: SynthesisRequest) -> SynthesisRequest:
    """``core`` with who asks (``[admission] caller``), for ``admit_after``."""
    from dataclasses import replace

    from ..guard import caller_of

    return replace(core, caller=caller_of(request, core.tenant))


async def _nothing() -> AsyncIterator[Audio]:
    return
    yield  # an async generator that ends at once


def status_of(exc: VoxcacheError) -> int:
    """The HTTP status for an error of voxcache's tree."""
    if isinstance(exc, RequestError):
        return exc.status
    if isinstance(exc, Overloaded | CacheDirError | MissingDependency):
        return 503
    if isinstance(exc, EngineError):
        return 502  # the engine, or the gateway's upstream, failed
    return 500


def error_json(exc: VoxcacheError, field: str) -> JSONResponse:
    """An error in the caller's protocol's shape (``field`` holds the message), with the
    service's ``{"error": {"message", "type"}}`` beside it so either kind of client reads it."""
    headers = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    status = status_of(exc)
    kind = "invalid_request_error" if status < 500 else "upstream_error"
    body = {field: str(exc), "error": {"message": str(exc), "type": kind}}
    return JSONResponse(body, status_code=status, headers=headers)
