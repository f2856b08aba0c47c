"""api_v2's weight and control endpoints, proxied to a GPT-SoVITS upstream.

``GET /set_gpt_weights?weights_path=…``, ``GET /set_sovits_weights?weights_path=…``,
``GET /set_refer_audio?refer_audio_path=…`` and ``GET /control?command=restart|exit``
reach the upstream with the same method and query, and its answer comes back
(``{"message": "success"}``, or its 400 ``{"message": "… failed", "Exception": …}``
with paths scrubbed). What each call leaves loaded on the upstream becomes the
revision in force (``upstream.gpt_sovits_switches``), so the same request after a
switch is a new key rendered by the new weights. api_v2 re-executes itself on
``restart`` without answering; the gateway then answers ``{"message": "success"}``.

A switch changes every tenant's voice, so once any API key is configured these
need an ``[admin]`` key, like ``/metrics``. An engine that is not a GPT-SoVITS
upstream has no weights to switch here: a 400 says so.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ...errors import UnsupportedFeature, VoxcacheError
from ...upstream.gpt_sovits import GptSovitsEngine
from ...upstream.gpt_sovits_switches import proxy
from ...upstream.http import error_fields, error_message
from ..errors import Forbidden
from ..guard import admin_only
from .compat import _cached
from .gpt_sovits import api_v2_error

router = APIRouter(tags=["gpt-sovits"])


@router.get("/set_gpt_weights")
async def set_gpt_weights(request: Request) -> Response:
    """Load other GPT (T2S) weights on the upstream: ``weights_path``, a path on its disk."""
    return await _proxied(request, "/set_gpt_weights")


@router.get("/set_sovits_weights")
async def set_sovits_weights(request: Request) -> Response:
    """Load other SoVITS (VITS) weights on the upstream: ``weights_path``."""
    return await _proxied(request, "/set_sovits_weights")


@router.get("/set_refer_audio")
async def set_refer_audio(request: Request) -> Response:
    """Load a reference clip into the upstream's prompt cache: ``refer_audio_path``."""
    return await _proxied(request, "/set_refer_audio")


@router.get("/control")
async def control(request: Request) -> Response:
    """``command=restart`` (the upstream comes back with its saved weights) or ``exit``."""
    return await _proxied(request, "/control")


async def _proxied(request: Request, endpoint: str) -> Response:
    try:
        await _admin(request)
        engine = _upstream(request, endpoint)
        answer = await asyncio.to_thread(proxy, engine, endpoint, dict(request.query_params))
    except VoxcacheError as exc:
        return api_v2_error(exc)
    if answer is None:  # it re-executed itself before answering, as api_v2 does on restart
        return JSONResponse({"message": "success"})
    return _passed_on(answer)


async def _admin(request: Request) -> None:
    """An ``[admin]`` key once any key is configured (a tenant's key may not switch)."""
    if getattr(request.app.state, "options", None) is None:
        return  # the routers mounted on a library user's own app: their app, their rules
    try:
        await admin_only(request)
    except Forbidden:
        raise Forbidden("a tenant's API key cannot switch the upstream's weights (a switch "
                        "changes every tenant's voice); send a key from the config's "
                        "[admin] api_keys") from None


def _upstream(request: Request, endpoint: str) -> GptSovitsEngine:
    """The GPT-SoVITS upstream, attached to the app's cache folder (where switches are
    recorded); any other engine is refused."""
    cached = _cached(request)
    engine = cached.engine
    if not isinstance(engine, GptSovitsEngine):
        raise UnsupportedFeature(
            f"{endpoint} is GPT-SoVITS api_v2's; this server renders with {engine.id!r}, "
            "which voxcache does not switch at run time (start it with other settings)")
    engine.attach(cached.cache)
    return engine


def _passed_on(answer: Any) -> Response:
    """The upstream's answer: 2xx as sent, 4xx with its fields scrubbed of paths, anything
    else a 502 naming the upstream's status."""
    status = answer.status_code
    if 200 <= status < 300:
        return Response(answer.content, status_code=status,
                        media_type=answer.headers.get("content-type", "application/json"))
    text = error_message(answer.content)
    if 400 <= status < 500:
        fields = error_fields(answer.content)
        return JSONResponse(fields if fields.get("message") else {"message": text},
                            status_code=status)
    return JSONResponse({"message": f"upstream answered {status}: {text}"}, status_code=502)
