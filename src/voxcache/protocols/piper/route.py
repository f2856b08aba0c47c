"""Piper's own HTTP protocol (``python -m piper.http_server``): ``POST /synthesize``, ``GET /info``,
``GET /voices`` — so a client written for Piper's server only changes the address, in front of a
``piper-http`` upstream or with the embedded Piper engine.

Read against piper-tts 1.8's ``piper/http_server.py`` (docs/operating/gateway.md, "Piper's HTTP
server"): the same fields, leniency and WAV bytes; its documents passed through (``last`` null once
API keys are configured); Flask's HTML error pages, with a 400 saying what to fix where Piper would
answer 500, 502 for a failed upstream and 503 with ``Retry-After`` for overload.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
from http import HTTPStatus
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from ...engine import Engine
from ...errors import InvalidParameter, NotFound, Overloaded, VoxcacheError
from ...formats import FORMATS, encode
from ...request import SynthesisRequest
from ...service.guard import render_priority
from ...service.routes.compat import engine_of, serve, status_of, tenant_of

log = logging.getLogger("voxcache.service")
router = APIRouter(tags=["piper"], dependencies=[Depends(render_priority)])
PIPER_ENGINES = ("piper-http", "piper")
NUMBERS = ("length_scale", "noise_scale", "noise_w_scale")


@router.post("/synthesize", response_class=Response,
             responses={200: {"content": {"audio/wav": {}}}})
async def synthesize(request: Request) -> Response:
    """Piper's synthesis: a JSON object in, the whole take as WAV out."""
    try:
        engine = _piper(request)
        tenant = await tenant_of(request)
        core = synthesis_request(await request.body(), engine, tenant)
        served = await serve(request, core, "piper")
    except (VoxcacheError, TimeoutError) as exc:
        return piper_error(exc)
    return Response(encode(served.audio, FORMATS["wav"]), media_type="audio/wav",
                    headers=served.headers)


@router.get("/info")
async def info(request: Request) -> Response:
    """The default voice and the last synthesis, as Piper's server reports them."""
    return await _document(request, "info")


@router.get("/voices")
async def voices(request: Request) -> Response:
    """Every installed voice's config, by name."""
    return await _document(request, "voices")


async def _document(request: Request, name: str) -> Response:
    try:
        engine = _piper(request)
        options = getattr(request.app.state, "options", None)
        if options is not None and options.keyed:
            await tenant_of(request)
        document = await asyncio.to_thread(engine.piper_document, name)  # type: ignore
    except (VoxcacheError, TimeoutError) as exc:
        return piper_error(exc)
    if name == "info" and options is not None and options.keyed:
        document = {**document, "last": None}
    # Flask's JSON: keys sorted, compact, non-ASCII escaped
    body = json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"
    return Response(body, media_type="application/json")


def synthesis_request(body: bytes, engine: Engine, tenant: str) -> SynthesisRequest:
    """Piper's body as the core request (see the module docstring for each field)."""
    try:
        data = json.loads(body or b"null")
    except ValueError:
        raise InvalidParameter("the body must be a JSON object, e.g. "
                               '{"text": "This is a test."}') from None
    if not isinstance(data, dict):
        raise InvalidParameter("the body must be a JSON object, e.g. "
                               '{"text": "This is a test."}')
    text = data.get("text", "")
    if not isinstance(text, str):
        raise InvalidParameter("text must be a string")
    if not text.strip():
        raise InvalidParameter("No text provided")
    voice = data.get("voice")
    if voice is not None and (not isinstance(voice, str) or voice not in engine.voices):
        log.warning("piper route: voice %r not found; using the default voice", voice)
        voice = None
    params: dict[str, Any] = {name: _number(data[name], name) for name in NUMBERS
                              if data.get(name) is not None}
    speaker = _speaker(data, engine)
    if speaker is not None:
        params["speaker_id"] = speaker
    return SynthesisRequest(text=text.strip(), voice=voice, params=params, tenant=tenant)


def _number(value: Any, name: str) -> float:
    """What Piper's ``float()`` makes of a field, refusing what it would crash on."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidParameter(f"{name} must be a number, got {value!r}") from None


def _speaker(data: dict[str, Any], engine: Engine) -> int | None:
    """A multi-speaker voice's speaker: ``speaker_id``, else the ``speaker`` name; a
    single-speaker voice takes none (Piper ignores both)."""
    spec = engine.params.get("speaker_id")
    speakers = 1 if spec is None or spec.maximum is None else int(spec.maximum) + 1
    if speakers <= 1:
        return None
    given = data.get("speaker_id")
    if given is None and data.get("speaker"):
        given = getattr(engine, "speaker_ids", {}).get(data["speaker"])
    if given is None:
        return None
    if isinstance(given, bool) or not isinstance(given, int):
        raise InvalidParameter(f"speaker_id must be a whole number, got {given!r}")
    return given if 0 <= given < speakers else 0


def _piper(request: Request) -> Engine:
    engine = engine_of(request)
    if engine.id not in PIPER_ENGINES:
        raise NotFound(f"Piper's HTTP routes are served in front of a piper-http upstream or "
                       f"with the piper engine; this server renders with {engine.id!r} "
                       "(use /v1/audio/speech or /v1/synthesize)")
    return engine


def piper_error(exc: BaseException) -> Response:
    """An error as Flask words it: an HTML page titled with the status, the reason in a
    paragraph (``werkzeug.exceptions.HTTPException.get_body``)."""
    status = 504 if isinstance(exc, TimeoutError) else status_of(exc)  # type: ignore[arg-type]
    message = str(exc) or "the render did not finish in time; try again later"
    phrase = HTTPStatus(status).phrase
    body = (f"<!doctype html>\n<html lang=en>\n<title>{status} {phrase}</title>\n"
            f"<h1>{phrase}</h1>\n<p>{html.escape(message)}</p>\n")
    headers = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(body, status_code=status, media_type="text/html; charset=utf-8",
                    headers=headers)
