"""GPT-SoVITS-compatible ``GET /tts`` (query) and ``POST /tts`` (JSON), as api_v2 serves them.

A client written for GPT-SoVITS's ``api_v2.py`` points at voxcache unchanged:
same field names and defaults (mapped by ``upstream.gpt_sovits_api``: unknown
fields ignored, required ones refused in api_v2's order and words), and the
bytes api_v2 sends:

- **whole** (``streaming_mode`` 0/false): ``audio/{media_type}``; a wav is the
  plain 44-byte-header file ``soundfile`` writes (the stored file's private
  ``vxch`` chunk stays in storage: clients that read bytes 44.. as PCM are
  common), raw is the PCM, ogg is Vorbis, aac is ADTS through ffmpeg.
- **streamed** (1, 2, 3 or true): ``audio/{media_type}``, chunked, as the take
  is produced — a miss as the engine (the upstream) speaks, a joiner of the
  same key following live, a hit as one chunk. wav is the header Python's
  ``wave`` module writes for zero frames (data size 0), then raw PCM; raw is
  PCM; ogg and aac are packed per chunk, as api_v2 packs each of its chunks.
  A render that fails after the first chunk cuts the response off (never a
  clean end), and nothing of it is stored.
- **errors**: api_v2's ``{"message": …}``, with ``"Exception"`` for a failed
  render (``{"message": "tts failed", "Exception": …}``); an upstream's own
  refusal keeps its 4xx status and fields (scrubbed of paths), other failures
  are 5xx (502 engine or upstream, 503 overloaded, 504 timed out).

``ref_audio_path`` is read only inside the operator's ``reference_roots``
(``voxcache.references``), confined to the caller's tenant folder when the
service has API keys; an app without settings reads no path at all.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import subprocess
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
from ...formats import FORMATS, encode, wav_header
from ...references import ReferenceFolders
from ...runtime import reference_folders
from ...upstream.gpt_sovits import PARAMS
from ...upstream.gpt_sovits_api import FIELDS, TtsCall, tts_call
from ..guard import render_priority
from .compat import Streamed, engine_of, serve, serve_streamed, status_of, tenant_of

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
    command = [_ffmpeg(), "-loglevel", "error", "-f", "s16le", "-ar", str(audio.sample_rate),
               "-ac", str(audio.channels), "-i", "pipe:0", "-c:a", "aac", "-b:a", "192k",
               "-f", "adts", "pipe:1"]
    done = subprocess.run(command, input=audio.pcm, capture_output=True, check=False)
    if done.returncode != 0:
        raise UnsupportedFeature(f"aac encoding failed: {done.stderr.decode()[-200:]}")
    return done.stdout


def _ffmpeg() -> str:
    """ffmpeg, which aac needs (as api_v2 does), or a refusal naming what works without it."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise UnsupportedFeature("media_type aac needs ffmpeg, which this server lacks; "
                                 "use wav, raw or ogg")
    return ffmpeg
