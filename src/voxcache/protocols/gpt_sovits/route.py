"""GPT-SoVITS api_v2's routes: ``GET``/``POST /tts`` and the proxied weight and control calls.

A client written for ``api_v2.py`` points at voxcache unchanged: same fields and defaults
(``mapping``), the bytes api_v2 sends (whole or streamed) and its error shapes.
``ref_audio_path`` is read only inside ``reference_roots``; the weight and control calls are
proxied (``switches`` keeps the revision) and need an ``[admin]`` key once API keys exist.
docs/operating/gateway.md, "GPT-SoVITS api_v2".
"""

from __future__ import annotations

import asyncio
import io
import shutil
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from ...audio import Audio
from ...errors import (
    EngineError,
    InvalidParameter,
    Overloaded,
    UnsupportedFeature,
    UpstreamError,
    VoxcacheError,
)
from ...formats import FORMATS, aac, encode, wav_header
from ...references import ReferenceFolders
from ...runtime import reference_folders
from ...service.errors import Forbidden
from ...service.guard import admin_only, render_priority
from ...service.routes.compat import (
    Streamed,
    _cached,
    engine_of,
    serve,
    serve_streamed,
    status_of,
    tenant_of,
)
from ...upstream.http import error_fields, error_message
from .fields import PARAMS
from .mapping import FIELDS, TtsCall, tts_call
from .switches import proxy
from .upstream import GptSovitsEngine

router = APIRouter(tags=["gpt-sovits"], dependencies=[Depends(render_priority)])
_JSON_TYPES = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}


def _schema(name: str) -> dict[str, Any]:
    """The OpenAPI schema of one api_v2 field (documentation; the mapping does the checking)."""
    if name == "aux_ref_audio_paths":
        return {"type": "array", "items": {"type": "string"}}
    if name == "streaming_mode":
        return {"anyOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1, 2, 3]}]}
    if name in PARAMS:
        return {"type": _JSON_TYPES[PARAMS[name].type]}
    kinds = {"speed_factor": "number", "seed": "integer"}
    return {"type": kinds.get(name, "string")}


_REQUIRED = ("text", "text_lang")
"""Required whatever the engine (api_v2 also requires ref_audio_path and prompt_lang)."""
_QUERY = {"parameters": [{"name": n, "in": "query", "required": n in _REQUIRED,
                          "schema": _schema(n)} for n in FIELDS]}
_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": list(_REQUIRED),
    "properties": {n: _schema(n) for n in FIELDS}}}}}}


@router.get("/tts", openapi_extra=_QUERY)
async def tts_get(request: Request) -> Response:
    """api_v2's GET form: every field as a query parameter (others are ignored)."""
    query = request.query_params
    fields: dict[str, Any] = dict(query)
    if "aux_ref_audio_paths" in query:
        fields["aux_ref_audio_paths"] = query.getlist("aux_ref_audio_paths")
    return await _tts(request, fields)


@router.post("/tts", openapi_extra=_BODY)
async def tts_post(request: Request) -> Response:
    """api_v2's POST form: a JSON object with the same fields (others are ignored)."""
    try:
        fields = await request.json()
    except ValueError:
        return api_v2_error(InvalidParameter("body must be JSON"))
    if not isinstance(fields, dict):
        return api_v2_error(InvalidParameter("body must be a JSON object"))
    return await _tts(request, fields)


async def _tts(request: Request, fields: dict[str, Any]) -> Response:
    try:
        tenant = await tenant_of(request)  # here, so a refused key is answered in api_v2's shape
        engine = engine_of(request)
        if fields.get("ref_audio_path") or fields.get("aux_ref_audio_paths"):
            # reading and fingerprinting clips is file I/O: keep it off the event loop
            call = await asyncio.to_thread(tts_call, fields, engine, tenant,
                                           _references(request))
        else:
            call = tts_call(fields, engine, tenant)
        if call.media_type == "aac":
            _ffmpeg()  # refused before rendering, not after
        if call.streaming:
            return await _streamed(request, call)
        served = await serve(request, call.request, "gpt-sovits")
        if call.media_type in ("wav", "raw"):
            body = _pack(served.audio, call.media_type)
        else:
            body = await asyncio.to_thread(_pack, served.audio, call.media_type)
    except (VoxcacheError, TimeoutError) as exc:
        return api_v2_error(exc)
    return Response(body, media_type=f"audio/{call.media_type}", headers=served.headers)


async def _streamed(request: Request, call: TtsCall) -> Response:
    """Hand the take over as it is produced (the first chunk is awaited before the status
    goes out, so an early failure is still a proper error)."""
    streamed = await serve_streamed(request, call.request, "gpt-sovits")
    return StreamingResponse(_stream(streamed, call.media_type),
                             media_type=f"audio/{call.media_type}", headers=streamed.headers)


async def _stream(streamed: Streamed, media_type: str) -> AsyncIterator[bytes]:
    """api_v2's streamed body: for wav the header ``wave`` writes for no frames, then raw
    PCM; raw as it is; ogg and aac one packed file per chunk. A failure raises, which
    cuts the response off."""
    if media_type == "wav":
        first = streamed.first
        yield wav_header(first.sample_rate, first.channels, 0)
    async for chunk in streamed.chunks():
        if media_type in ("wav", "raw"):
            yield chunk.pcm
        else:
            yield await asyncio.to_thread(_pack, chunk, media_type)


def api_v2_error(exc: BaseException) -> JSONResponse:
    """An error as api_v2 answers it: ``{"message"}`` for a refusal, ``{"message": "tts
    failed", "Exception"}`` for a failed render; an upstream's 4xx keeps its status and its
    own (scrubbed) fields, so a client never retries what the upstream refuses."""
    headers = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if getattr(exc, "status", None) == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, TimeoutError):
        return JSONResponse({"message": "tts failed",
                             "Exception": "the render did not finish in time; try again later"},
                            status_code=504)
    assert isinstance(exc, VoxcacheError)
    status = status_of(exc)
    body: dict[str, str] = {"message": str(exc)}
    if isinstance(exc, UpstreamError) and 400 <= (exc.upstream_status or 0) < 500:
        status = exc.upstream_status or status
        reply = exc.upstream_reply
        body = ({k: reply[k] for k in ("message", "Exception") if k in reply}
                if reply.get("message") else {"message": "tts failed", "Exception": str(exc)})
    elif isinstance(exc, EngineError):
        body = {"message": "tts failed", "Exception": str(exc)}
    return JSONResponse(body, status_code=status, headers=headers)


def _references(request: Request) -> ReferenceFolders:
    """The service's reference folders: tenant-scoped when it has API keys."""
    state = request.app.state
    settings = getattr(state, "settings", None)
    if settings is None:
        return ReferenceFolders()
    options = getattr(state, "options", None)
    return reference_folders(settings, per_tenant=bool(options and options.api_keys))


def _pack(audio: Audio, media_type: str) -> bytes:
    """Pack audio as api_v2 does: wav the plain 44-byte-header file (what ``soundfile``
    writes), raw the PCM, ogg Vorbis, aac ADTS through ffmpeg."""
    if media_type == "wav":
        return encode(audio, FORMATS["wav"])
    if media_type == "raw":
        return audio.pcm
    if media_type == "ogg":
        import soundfile

        buffer = io.BytesIO()
        samples = audio.samples().reshape(-1, audio.channels)
        soundfile.write(buffer, samples, audio.sample_rate, format="OGG", subtype="VORBIS")
        return buffer.getvalue()
    return aac(audio, bitrate="192k")  # api_v2's bitrate


def _ffmpeg() -> str:
    """ffmpeg, which aac needs (as api_v2 does), or a refusal naming what works without it."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise UnsupportedFeature("media_type aac needs ffmpeg, which this server lacks; "
                                 "use wav, raw or ogg")
    return ffmpeg


# -- api_v2's weight and control calls, proxied --------------------------------------------

control_router = APIRouter(tags=["gpt-sovits"])
"""The proxied weight and control calls (no render priority: they render nothing)."""


@control_router.get("/set_gpt_weights")
async def set_gpt_weights(request: Request) -> Response:
    """Load other GPT (T2S) weights on the upstream: ``weights_path``, a path on its disk."""
    return await _proxied(request, "/set_gpt_weights")


@control_router.get("/set_sovits_weights")
async def set_sovits_weights(request: Request) -> Response:
    """Load other SoVITS (VITS) weights on the upstream: ``weights_path``."""
    return await _proxied(request, "/set_sovits_weights")


@control_router.get("/set_refer_audio")
async def set_refer_audio(request: Request) -> Response:
    """Load a reference clip into the upstream's prompt cache: ``refer_audio_path``."""
    return await _proxied(request, "/set_refer_audio")


@control_router.get("/control")
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
