"""``POST /v1/audio/speech``, OpenAI's speech route, as a plain Starlette endpoint.

A hit is every request but the first, so the endpoint is an ASGI callable on the app's
router (no dependency injection, no pydantic): it reads the body once, answers a
remembered request whose take is in memory (``speech_memo.answer``) and otherwise
parses the body with msgspec and serves it the way every synthesis route does
(``service.speech.serve``). Where the two protocols differ it answers as OpenAI does:
``pcm`` is 24 kHz, and a refusal names the body field at fault (``param``) with OpenAI's
``code`` — an unknown voice is a 400 ``invalid_value`` listing every name that works.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ...errors import InvalidParameter, NotFound, RequestError, UnknownVoice, UnsupportedFeature
from ...formats import lookup
from ...policies.seeds import parse_seed_policy
from ...request import SynthesisRequest
from ...service.errors import FieldRefusal, VoiceClipDropped
from ...service.guard import read_body, scope_tenant, set_priority, tenant_from
from ...service.plain_routes import PlainEndpoint, mount_first, refusing
from ...service.serving import Server
from ...service.speech import AUDIO_RESPONSES, serve, voice_fields
from ...service.speech_memo import Identity, answer, identity_of
from .fields import (
    OPENAI_MODELS,
    OPENAI_PCM_RATE,
    VALIDATION,
    SpeechRequest,
    VoiceRef,
    decode,
    is_json,
    refusal,
)

PATH = "/v1/audio/speech"
OPENAI_FIELDS = {"text": "input", "voice": "voice", "reference_audio": "voice",
                 "language": "language", "instruct": "instructions", "seed": "seed",
                 "speed": "speed", "params": "params"}
"""Core request fields → the OpenAI body field a caller set them with."""
OPENAI_CODES: list[tuple[tuple[type[RequestError], ...], str]] = [
    ((UnsupportedFeature,), "unsupported_value"),
    ((InvalidParameter, UnknownVoice, NotFound), "invalid_value"),
]
"""voxcache's refusals → OpenAI's ``code`` (others keep voxcache's class name)."""


class SpeechEndpoint(PlainEndpoint):
    """The ASGI endpoint: a memory hit of a remembered request, else the whole route (whose
    refusals go through the app's handlers: ``refusing``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        message = await receive()  # the first of the body's parts (usually all of it)
        if message["type"] != "http.request":
            return  # the client went away
        body = message.get("body", b"")
        if message.get("more_body", False):
            rest = await read_body(receive)  # BodyLimit has read and bounded it already
            if rest is None:
                return  # the client went away
            body += b"".join(rest)
        parts = self.parts(scope["app"])
        tenant = scope_tenant(parts.options.api_keys, scope)
        identity = None if tenant is None else identity_of(tenant, body, dict(scope["headers"]))
        if identity is not None and await answer(parts.server, parts.memo, identity, send,
                                                 started):
            return

        async def whole_route(scope: Scope, receive: Receive, send: Send) -> None:
            response = await speech(Request(scope, receive), body, identity, started)
            await response(scope, receive, send)

        await refusing(parts.handlers, whole_route, scope, receive, send)


async def speech(request: Request, raw: bytes, identity: Identity | None,
                 started: float) -> Response:
    """OpenAI-compatible speech: the official ``openai`` client works unchanged."""
    body = _parse(request, raw)
    server: Server = request.app.state.server
    tenant = tenant_from(request.app.state.options, request.headers)
    if body is None:
        raise _refused(raw, request.headers.get("content-type"))
    field: str | None = "model"  # the body field being checked, for a refusal's ``param``
    core: SynthesisRequest | None = None
    try:  # one try, not a context manager per step
        _check_model(server, body.model)
        field = "response_format"
        fmt = lookup(body.response_format)
        if fmt.name == "pcm":
            fmt = fmt.at(OPENAI_PCM_RATE)
        field = "voice"
        voice = body.voice.id if isinstance(body.voice, VoiceRef) else body.voice
        found = await voice_fields(request, tenant, voice, openai=True)
        field = None
        core = SynthesisRequest(text=body.input, instruct=body.instructions,
                                language=body.language, seed=body.seed, speed=body.speed,
                                params=body.params, tenant=tenant, seed_policy=body.seed_policy,
                                **found)
        sse = body.stream_format == "sse"
        # OpenAI streams its bodies: a miss goes out as it renders where the engine's audio
        # arrives in pieces from a server (a gateway's upstream), and always for pcm
        progressive = fmt.name == "pcm" or server.cached.engine.streams_from_server
        return await serve(request, "speech", core, fmt, body.cache, sse or progressive, sse,
                           started, text=body.input, memo=None if sse else identity)
    except FieldRefusal:
        raise
    except RequestError as exc:
        if field is None and core is not None:
            field = _blame(server, core)
        raise _openai_refusal(exc, field) from exc


def _parse(request: Request, raw: bytes) -> SpeechRequest | None:
    """The body as a ``SpeechRequest`` (None: not one, refused once the caller is known);
    malformed JSON is refused first, and ``X-Voxcache-Priority`` checked, as FastAPI's
    order was (body syntax, then dependencies, then fields)."""
    body = None
    if raw and is_json(request.headers.get("content-type")):
        try:
            body = decode(raw)
        except msgspec.ValidationError:
            pass
        except ValueError:
            raise _refused(raw, request.headers.get("content-type")) from None
    set_priority(request.headers.get("x-voxcache-priority"))
    return body


def _refused(raw: bytes, content_type: str | None) -> FieldRefusal:
    """``fields.refusal`` as the error to raise (a body that is empty or not declared JSON
    is refused as a whole)."""
    if not raw:
        message, param, code = "invalid request: body: Field required", None, VALIDATION
    elif not is_json(content_type):
        message, param, code = ("invalid request: body: send a JSON object with "
                                "Content-Type: application/json", None, VALIDATION)
    else:
        message, param, code = refusal(raw)
    return FieldRefusal(message, param=param, code=code)


def _check_model(server: Server, model: str | None) -> None:
    engine = server.cached.engine.id
    if model and model != engine and model not in OPENAI_MODELS:
        raise InvalidParameter(f"model {model!r} is not served here; this server renders with "
                               f"{engine!r} and also accepts {', '.join(OPENAI_MODELS)}")


def _openai_refusal(exc: RequestError, param: str | None) -> FieldRefusal:
    """``exc`` as OpenAI words a refusal: the body field at fault and OpenAI's code. An
    unknown voice is a 400 there, not a 404; voxcache's own statuses (413, 409) stay."""
    status = 400 if isinstance(exc, UnknownVoice | NotFound) else exc.status
    code = next((code for cls, code in OPENAI_CODES if isinstance(exc, cls)), type(exc).__name__)
    if isinstance(exc, VoiceClipDropped):
        param = "voice"
    return FieldRefusal(str(exc), status=status, param=param, code=code)


def _blame(server: Server, core: SynthesisRequest) -> str | None:
    """The OpenAI field that alone makes resolution refuse ``core`` (None: no single one).

    Runs on the error path only: each field the caller set is resolved on its own,
    beside defaults that resolve, and the first that fails is the one at fault."""
    plain = SynthesisRequest(text="a", tenant=core.tenant)
    for field, param in OPENAI_FIELDS.items():
        value = getattr(core, field)
        if value == getattr(plain, field):
            continue
        alone = dataclasses.replace(plain, **{field: value})
        if field == "reference_audio":
            alone = dataclasses.replace(alone, prompt_text=core.prompt_text)
        try:
            server.cached.resolve(alone)
        except RequestError:
            return param
    if core.seed_policy is not None:
        try:
            parse_seed_policy(core.seed_policy)
        except RequestError:
            return "seed_policy"
    return None


def install(app: FastAPI) -> None:
    """Mount the route first on the app's router, described in ``/openapi.json``."""
    schemas, components = msgspec.json.schema_components(
        (SpeechRequest,), ref_template="#/components/schemas/{name}")
    operation: dict[str, Any] = {
        "tags": ["synthesis"], "summary": "Speech", "operationId": "speech_v1_audio_speech_post",
        "description": "OpenAI-compatible speech: the official ``openai`` client works "
                       "unchanged.",
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": schemas[0]}}},
        "responses": {str(code): {"description": "", **spec}
                      for code, spec in AUDIO_RESPONSES.items()}}
    mount_first(app, PATH, SpeechEndpoint(), "POST", "speech", operation, components)
