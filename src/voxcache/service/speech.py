"""Native synthesis, ``POST /v1/synthesize``, and the path every synthesis route shares.

A route builds one core ``SynthesisRequest`` (the tenant from the API key, a named
uploaded voice replaced by its clip and prompt text: ``voice_fields``) and hands it to
``serve``: ``Server.take`` then ``respond``. A route never chooses an error status; it
raises from the error tree and ``errors.STATUS`` decides. OpenAI's route is
``protocols.openai.route``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import time
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from ..errors import InvalidParameter, NotFound, UnknownVoice, UnsupportedFeature
from ..formats import Format, lookup
from ..request import SynthesisRequest
from ..vocabulary import Mode, cache_mode
from .errors import VoiceClipDropped
from .guard import caller_of, render_priority, tenant_of
from .options import OPENAI_VOICES
from .respond import STREAMABLE, streamed, whole
from .schemas import SynthesizeRequest
from .serving import Server
from .speech_memo import Decision, Identity
from .voices import VOICE_ID, Voice

EMBEDDING_WIDTH = 256
"""A speaker embedding's size (resemblyzer's, ``stages.embeddings``)."""

router = APIRouter(dependencies=[Depends(render_priority)])

AUDIO_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"audio/wav": {}, "audio/mpeg": {}, "audio/flac": {}, "audio/pcm": {},
                      "audio/aac": {},
                      "text/event-stream": {}},
          "description": "audio; X-Cache says how it was served"},
    400: {"description": "invalid request (OpenAI's error shape: param names the field)"},
    401: {"description": "bad API key"}, 503: {"description": "overloaded"},
}

@router.post("/v1/synthesize", responses=AUDIO_RESPONSES, tags=["synthesis"])
async def synthesize(body: SynthesizeRequest, request: Request,
                     tenant: str = Depends(tenant_of)) -> Response:
    """Native synthesis: every field of the core request, base64 reference audio included."""
    started = time.perf_counter()
    fields = body.model_dump()
    for name in ("response_format", "stream", "cache"):
        fields.pop(name)
    if fields.get("reference_audio") is not None:
        fields["reference_audio"] = _b64(fields["reference_audio"])
        if fields.get("voice"):
            raise InvalidParameter("send either voice or reference_audio, not both")
    else:
        fields.pop("reference_audio")
        found = await voice_fields(request, tenant, fields.pop("voice"))
        if "prompt_text" in found and fields.get("prompt_text"):
            raise InvalidParameter("an uploaded voice carries its own prompt_text; omit it")
        fields.update({k: v for k, v in found.items() if v is not None or k == "voice"})
    core = SynthesisRequest(**fields, tenant=tenant)
    return await serve(request, "synthesize", core, lookup(body.response_format), body.cache,
                       body.stream, False, started)


async def serve(request: Request, route: str, core: SynthesisRequest, fmt: Format,
                mode: Mode, stream: bool, sse: bool, started: float, text: str = "",
                memo: Identity | None = None) -> Response:
    """Serve ``core`` in ``fmt`` (``X-Cache-Mode`` beats ``mode``); ``memo``: the request's
    identity, remembered when the take is served by key alone from now on."""
    server: Server = request.app.state.server
    mode = cache_mode(request.headers.get("x-cache-mode"), mode)
    core = dataclasses.replace(core, caller=caller_of(request, core.tenant))
    if stream and not sse and fmt.name not in STREAMABLE:
        stream = False  # flac (and aac) are delivered whole: they cannot be cut while encoded
    private = getattr(request.state, "private_voice", None)
    resolved, key = await server.resolve(core)
    if (memo is not None and mode is Mode.USE and private is None and core.reference_audio is None
            and server.cached.uses_pin(core, resolved)):
        # served by key alone from now on: the next identical request skips this route
        request.app.state.speech_memo.remember(memo, Decision(resolved, key, fmt))
    if private is not None:
        resolved = dataclasses.replace(resolved, voice=None, reference_fingerprint=private[0],
                                       prompt_text=private[1])
        take = await server.cached.stored_take(resolved)
        if take is None:
            raise VoiceClipDropped(
                "this voice was uploaded in privacy mode: its clip was not kept, so only takes "
                "already stored can be served; upload the clip again to render new text")
    else:
        take = await server.take(resolved, key, mode, stream=stream, request=core)
    if sse or take.streaming:  # a stored take goes whole, with Content-Length
        response = await streamed(server, take, fmt, started, sse, text)
    else:
        response = await whole(server, take, fmt, started)
    server.metrics.request(route, take.cache.header, response.status_code)
    return response


async def voice_fields(request: Request, tenant: str, name: str | None,
                        openai: bool = False) -> dict[str, Any]:
    """Map a voice name to request fields: an uploaded voice (a clip, a tensor, or — for an
    engine that takes a tensor of its shape and no clips — a clip's speaker embedding), an
    alias, or an engine voice.

    ``openai``: a name that is none of those is refused here, listing every name that
    works (OpenAI's names and the ``[voice_aliases]`` included)."""
    if not name:
        return {"voice": None}
    state = request.app.state
    engine = state.server.cached.engine
    aliases: dict[str, str] = state.options.voice_aliases
    if openai and not VOICE_ID.fullmatch(name) and name not in aliases \
            and name not in engine.voices and name not in OPENAI_VOICES:
        known = ", ".join(repr(v) for v in sorted({*engine.voices, *OPENAI_VOICES, *aliases}))
        raise UnknownVoice(f"Invalid value: {name!r} is not a voice of this server. Supported "
                           f"values are: {known}, or an uploaded voice id (vc_…)")
    if VOICE_ID.fullmatch(name):
        voice = await state.server.admission.read(state.voices.get, tenant, name)
        if voice.kind == "tensor" or (not engine.supports_reference and _takes_embedding(
                engine)):
            return {"voice": None, "voice_tensor": await _tensor_of(request, tenant, voice)}
        if not engine.supports_reference:
            raise UnsupportedFeature(
                f"voice {name!r} is an uploaded clip, but engine {engine.id!r} cannot clone "
                f"voices; use one of its own: {', '.join(sorted(set(engine.voices)))}")
        clip = state.voices.clip(tenant, name)
        if clip is None:
            request.state.private_voice = (voice.fingerprint, voice.prompt_text)
            return {"voice": None}
        return {"voice": None, "reference_audio": clip, "prompt_text": voice.prompt_text}
    if name in aliases:
        return {"voice": aliases[name]}
    if name in engine.voices:  # an engine's own voice wins (an OpenAI upstream has "nova")
        return {"voice": name}
    if name in OPENAI_VOICES:
        return {"voice": engine.default_voice}
    return {"voice": name}


def _takes_embedding(engine: Any) -> bool:
    """Whether an engine's tensor voices have a speaker embedding's shape (256 float32)."""
    spec = engine.tensor_voice
    return spec is not None and tuple(spec.shape) == (EMBEDDING_WIDTH,) and \
        spec.dtype == "float32"


async def _tensor_of(request: Request, tenant: str, voice: Voice) -> Any:
    """The array an uploaded voice is to an engine that takes tensors: a tensor voice's own,
    or a clip voice's speaker embedding (from the stage cache)."""
    state = request.app.state
    engine = state.server.cached.engine
    if engine.tensor_voice is None:
        raise UnsupportedFeature(
            f"voice {voice.id!r} is a tensor voice, but engine {engine.id!r} takes no tensor "
            f"voices (it takes: {', '.join(engine.voice_kinds)})")
    if voice.kind == "tensor":
        array = await state.server.admission.read(state.voices.tensor, tenant, voice.id)
        if array is None:
            raise NotFound(f"no voice {voice.id!r}")
        return array
    from .voice_routes import artifacts

    result = await artifacts(request).of_voice(state.voices, voice)
    return result.artifact["embedding"]


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidParameter("reference_audio must be base64 (a WAV, FLAC or OGG file)") from None
