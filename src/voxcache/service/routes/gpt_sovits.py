"""GPT-SoVITS-compatible ``GET /tts`` (query) and ``POST /tts`` (JSON), as api_v2 serves them.

A client written for GPT-SoVITS's ``api_v2.py`` points at voxcache unchanged:
same field names and defaults (mapped by ``upstream.gpt_sovits_api``), audio as
``audio/{media_type}`` (wav, raw, ogg; aac when ffmpeg is installed), errors as
api_v2's ``{"message": …}`` JSON. With ``streaming_mode`` the take is sent as a
chunked stream, but always a whole take: the cache stores and serves complete
takes, so a hit streams from storage at once.

``ref_audio_path`` is read only inside the operator's ``reference_roots``
(``voxcache.references``), confined to the caller's tenant folder when the
service has API keys; an app without settings reads no path at all.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse

from ...audio import Audio
from ...errors import InvalidParameter, UnsupportedFeature, VoxcacheError
from ...references import ReferenceFolders
from ...runtime import reference_folders
from ...upstream.gpt_sovits import PARAMS
from ...upstream.gpt_sovits_api import FIELDS, tts_call
from ..guard import render_priority
from .compat import engine_of, error_json, serve, tenant_of

router = APIRouter(tags=["gpt-sovits"], dependencies=[Depends(render_priority)])
STREAM_CHUNK = 64 * 1024
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


_QUERY = {"parameters": [{"name": n, "in": "query", "required": n == "text",
                          "schema": _schema(n)} for n in FIELDS]}
_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["text"],
    "properties": {n: _schema(n) for n in FIELDS}}}}}}


@router.get("/tts", openapi_extra=_QUERY)
async def tts_get(request: Request, tenant: str = Depends(tenant_of)) -> Response:
    """api_v2's GET form: every field as a query parameter."""
    query = request.query_params
    fields: dict[str, Any] = dict(query)
    if "aux_ref_audio_paths" in query:
        fields["aux_ref_audio_paths"] = query.getlist("aux_ref_audio_paths")
    return await _tts(request, fields, tenant)


@router.post("/tts", openapi_extra=_BODY)
async def tts_post(request: Request, tenant: str = Depends(tenant_of)) -> Response:
    """api_v2's POST form: a JSON object with the same fields."""
    try:
        fields = await request.json()
    except ValueError:
        return error_json(InvalidParameter("body must be JSON"), "message")
    if not isinstance(fields, dict):
        return error_json(InvalidParameter("body must be a JSON object"), "message")
    return await _tts(request, fields, tenant)


async def _tts(request: Request, fields: dict[str, Any], tenant: str) -> Response:
    try:
        engine = engine_of(request)
        if fields.get("ref_audio_path") or fields.get("aux_ref_audio_paths"):
            # reading and fingerprinting clips is file I/O: keep it off the event loop
            call = await asyncio.to_thread(tts_call, fields, engine, tenant,
                                           _references(request))
        else:
            call = tts_call(fields, engine, tenant)
        served = await serve(request, call.request, "gpt-sovits")
        body = served.wav if call.media_type == "wav" else await asyncio.to_thread(
            _encode, served.audio, call.media_type)
    except VoxcacheError as exc:
        return error_json(exc, "message")
    media_type = f"audio/{call.media_type}"
    if call.streaming:
        return StreamingResponse(_chunks(body), media_type=media_type, headers=served.headers)
    return Response(body, media_type=media_type, headers=served.headers)


def _references(request: Request) -> ReferenceFolders:
    """The service's reference folders: tenant-scoped when it has API keys."""
    state = request.app.state
    settings = getattr(state, "settings", None)
    if settings is None:
        return ReferenceFolders()
    options = getattr(state, "options", None)
    return reference_folders(settings, per_tenant=bool(options and options.api_keys))


def _encode(audio: Audio, media_type: str) -> bytes:
    """raw: the PCM itself; ogg: Vorbis as api_v2 writes it; aac: through ffmpeg, like api_v2."""
    if media_type == "raw":
        return audio.pcm
    if media_type == "ogg":
        import soundfile

        buffer = io.BytesIO()
        samples = audio.samples().reshape(-1, audio.channels)
        soundfile.write(buffer, samples, audio.sample_rate, format="OGG", subtype="VORBIS")
        return buffer.getvalue()
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise UnsupportedFeature("media_type aac needs ffmpeg, which this server lacks; "
                                 "use wav, raw or ogg")
    command = [ffmpeg, "-loglevel", "error", "-f", "s16le", "-ar", str(audio.sample_rate),
               "-ac", str(audio.channels), "-i", "pipe:0", "-c:a", "aac", "-b:a", "192k",
               "-f", "adts", "pipe:1"]
    done = subprocess.run(command, input=audio.pcm, capture_output=True, check=False)
    if done.returncode != 0:
        raise UnsupportedFeature(f"aac encoding failed: {done.stderr.decode()[-200:]}")
    return done.stdout


def _chunks(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), STREAM_CHUNK):
        yield body[start:start + STREAM_CHUNK]
