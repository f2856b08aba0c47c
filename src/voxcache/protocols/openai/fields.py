"""OpenAI's ``CreateSpeechRequest`` (plus voxcache's extensions) as a msgspec struct, and
its refusals in OpenAI's terms: the body field at fault (``param``) and OpenAI's ``code``.

Unknown fields are refused: a misspelt parameter silently ignored would serve audio
rendered with settings the caller did not ask for. No FastAPI here: the upstream client
imports the names below too.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ...vocabulary import Mode

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage",
                 "shimmer", "verse", "marin", "cedar")
"""OpenAI's built-in voices, as its API reference lists them (also the service's aliases)."""
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-tts")
"""OpenAI model names accepted as aliases of the configured engine."""
OPENAI_PCM_RATE = 24000
"""OpenAI's ``pcm``: 24 kHz, 16-bit, mono."""
VALIDATION = "ValidationError"
"""The ``code`` of a refusal no single field is at fault for (pydantic's word, kept)."""


class VoiceRef(msgspec.Struct, forbid_unknown_fields=True):
    """OpenAI's custom-voice form: ``{"id": "vc_..."}``."""

    id: Annotated[str, Meta(min_length=1, max_length=200)]


class SpeechRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """OpenAI ``CreateSpeechRequest`` plus voxcache's optional extensions."""

    input: Annotated[str, Meta(max_length=100_000, description="text to speak")]
    model: Annotated[str, Meta(max_length=200, description=(
        "engine id, or an OpenAI model name (tts-1, gpt-4o-mini-tts…) meaning the "
        "configured engine"))] | None = None
    voice: Annotated[str | VoiceRef | None, Meta(description=(
        "an engine voice, an OpenAI voice name (an alias), or an uploaded voice id (vc_…)"))
    ] = None
    response_format: Annotated[str, Meta(max_length=20)] = "mp3"
    speed: Annotated[float, Meta(description="0.25 to 4.0")] = 1.0
    instructions: Annotated[str, Meta(max_length=4096)] | None = None
    stream_format: Literal["audio", "sse"] = "audio"
    # voxcache extensions (the official client can send them through extra_body)
    language: Annotated[str, Meta(max_length=35)] | None = None
    seed: int | None = None
    params: Annotated[dict[str, Any], Meta(
        description="engine parameters (see GET /v1/engine)")] = {}
    seed_policy: Annotated[str, Meta(max_length=40, description=(
        "unseeded requests: pin, bypass or variants:N (default: the server's)"))] | None = None
    cache: Mode = Mode.USE


FIELDS = frozenset(SpeechRequest.__struct_fields__)
DECODER = msgspec.json.Decoder(SpeechRequest, strict=False)
"""Lax where JSON clients are (``"1.5"`` for a number), as the pydantic model was."""
CODES = (("missing required field", "missing_required_parameter"),
         ("unknown field", "unknown_parameter"),
         ("of length <=", "string_above_max_length"),
         ("of length >=", "string_below_min_length"),
         ("Expected `", "invalid_type"))
"""msgspec's messages → OpenAI's ``code`` (anything else about a value: ``invalid_value``)."""


def is_json(content_type: str | None) -> bool:
    """Whether the body is declared JSON (``application/json`` or ``application/*+json``)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                          and kind.endswith("+json"))


def decode(body: bytes) -> SpeechRequest:
    """The body as a ``SpeechRequest``: ``msgspec.ValidationError`` when it is not one,
    ``ValueError`` when it is not JSON. ``NaN``, ``Infinity`` and ``1e999`` are read as
    Python's ``json`` (FastAPI's) reads them, so the core refuses them naming the field."""
    try:
        return DECODER.decode(body)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError:
        return msgspec.convert(_loaded(body), SpeechRequest, strict=False)


def _loaded(body: bytes) -> Any:
    """The JSON value of ``body`` (``ValueError`` when it is none)."""
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return json.loads(body)


def refusal(body: bytes) -> tuple[str, str | None, str]:
    """Why ``body`` is not a ``SpeechRequest``: (message, param, code). Runs on the error
    path only: each field is checked on its own beside a valid ``input``, so ``param``
    names the field at fault when exactly one is (else None, as for a body that is not an
    object at all)."""
    try:
        data = _loaded(body)
    except ValueError as exc:
        return f"invalid request: body: {exc}", None, VALIDATION
    if not isinstance(data, dict):
        return "invalid request: body: must be a JSON object", None, VALIDATION
    faults: dict[str, str] = {}
    if "input" not in data:
        faults["input"] = "Object missing required field `input`"
    for name, value in data.items():
        if name not in FIELDS:
            faults[name] = f"Object contains unknown field `{name}`"
            continue
        try:
            msgspec.convert({"input": "", name: value}, SpeechRequest, strict=False)
        except msgspec.ValidationError as exc:
            faults[name] = str(exc).split(" - at `", 1)[0]
    problems = "; ".join(f"{name}: {why}" for name, why in list(faults.items())[:5])
    if len(faults) != 1:
        return f"invalid request: {problems or 'not a speech request'}", None, VALIDATION
    (name, why), = faults.items()
    code = next((code for words, code in CODES if words in why), "invalid_value")
    return f"invalid request: {problems}", name, code
