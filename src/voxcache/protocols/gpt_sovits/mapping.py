"""GPT-SoVITS api_v2 ``/tts`` fields → a core ``SynthesisRequest``, for any engine.

``text_lang`` is the language, ``speed_factor`` the speed, ``seed`` the seed; sampling fields
reach an engine only if it declares them, and for any other engine a field left at api_v2's
default is accepted while another value is a 400 (never silently ignored). Unknown fields are
ignored and required ones refused in api_v2's order and words; text fields must be strings.
``ref_audio_path`` is read only through the operator's reference folders: keyed by content for
the GPT-SoVITS upstream (``fields``), cloned from the bytes read for an embedded engine.
Why each rule: docs/operating/gateway.md, "GPT-SoVITS api_v2".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...engine import Engine
from ...errors import InvalidParameter, UnsupportedFeature
from ...references import ReferenceFolders
from ...request import SynthesisRequest
from .fields import PARAMS, reference_params

MEDIA_TYPES = ("wav", "raw", "ogg", "aac")
REFERENCE_FIELDS = ("ref_audio_path", "aux_ref_audio_paths", "prompt_text", "prompt_lang")
CORE_FIELDS = ("text", "text_lang", "speed_factor", "seed", "media_type", "streaming_mode")
SAMPLING_FIELDS = tuple(name for name in PARAMS if name not in (
    "ref_audio_path", "ref_audio_id", "aux_ref_audio_paths", "aux_ref_audio_ids", "prompt_text",
    "prompt_lang", "streaming_mode"))
FIELDS = CORE_FIELDS + REFERENCE_FIELDS + SAMPLING_FIELDS
"""Every field api_v2's ``/tts`` takes."""
STRING_FIELDS = ("text", "text_lang", "ref_audio_path", "prompt_text", "prompt_lang",
                 "media_type")
"""Fields api_v2 types as ``str``."""
_JSON_KINDS = {bool: "a boolean", int: "a number", float: "a number", list: "a list",
               dict: "an object"}


@dataclass(frozen=True, slots=True)
class TtsCall:
    """A mapped ``/tts`` call: what to synthesize and how to deliver it."""

    request: SynthesisRequest
    media_type: str
    streaming: bool


def parse_streaming_mode(value: Any) -> int:
    """api_v2 takes a bool or 0–3; strings come from GET queries."""
    if value is None:
        return 0
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return int(text == "true")
    if text in ("0", "1", "2", "3"):
        return int(text)
    raise InvalidParameter(
        "the value of streaming_mode must be 0, 1, 2, 3 (int) or true/false (bool)")


def tts_call(fields: Mapping[str, Any], engine: Engine, tenant: str = "default",
             references: ReferenceFolders | None = None) -> TtsCall:
    """Map api_v2 ``/tts`` fields onto ``engine``, refusing what it cannot honour.

    ``references`` are the folders an embedded engine's ``ref_audio_path`` is read from
    (none: paths refused); the GPT-SoVITS upstream reads through its own, the ones its
    render-time check uses."""
    given = {k: v for k, v in fields.items() if v is not None and k in FIELDS}
    for name in STRING_FIELDS:
        if name in given and not isinstance(given[name], str):
            kind = _JSON_KINDS.get(type(given[name]), type(given[name]).__name__)
            raise InvalidParameter(f"{name} must be a string, got {kind}")
    _require(given, engine)
    text = given["text"]
    media_type = str(given.get("media_type", "wav")).lower()
    if media_type not in MEDIA_TYPES:
        raise InvalidParameter(f"media_type: {media_type} is not supported; "
                               f"use one of {', '.join(MEDIA_TYPES)}")
    streaming = parse_streaming_mode(given.get("streaming_mode"))
    language = str(given["text_lang"]).lower() if given.get("text_lang") else None
    params = _sampling(given, engine)
    if "streaming_mode" in engine.params:
        params["streaming_mode"] = streaming
    if references is None:
        references = ReferenceFolders()
    reference = _reference(given, engine, language, params, tenant, references)
    return TtsCall(
        SynthesisRequest(text=text, language=language, speed=_speed(given),
                         seed=_seed(given, engine), params=params, tenant=tenant, **reference),
        media_type, streaming > 0)


def _require(given: Mapping[str, Any], engine: Engine) -> None:
    """api_v2's required fields, in its order and words (see the module's notes)."""
    clones = "ref_audio_path" in engine.params or bool(given.get("ref_audio_path"))
    required = (("ref_audio_path",) if "ref_audio_path" in engine.params else ()) + (
        "text", "text_lang") + (("prompt_lang",) if clones else ())
    for name in required:
        if not given.get(name):
            raise InvalidParameter(f"{name} is required")


def _sampling(given: Mapping[str, Any], engine: Engine) -> dict[str, Any]:
    """Sampling fields the engine declares; refuse non-default ones it does not."""
    params: dict[str, Any] = {}
    for name in SAMPLING_FIELDS:
        if name not in given:
            continue
        if name in engine.params:
            params[name] = given[name]
            continue
        spec = PARAMS[name]
        if spec.coerce(given[name]) != spec.default:
            raise UnsupportedFeature(
                f"engine {engine.id!r} cannot honour {name}={given[name]!r}; leave it at "
                f"{spec.default!r} or omit it")
    return params


def _reference(given: Mapping[str, Any], engine: Engine, language: str | None,
               params: dict[str, Any], tenant: str,
               references: ReferenceFolders) -> dict[str, Any]:
    """Reference fields: content-keyed paths for GPT-SoVITS, the clip's bytes for others."""
    path = given.get("ref_audio_path") or ""
    aux = _paths(given.get("aux_ref_audio_paths"))
    prompt_text = given.get("prompt_text") or ""
    prompt_lang = (given.get("prompt_lang") or "").lower()
    if prompt_lang and prompt_lang == language:
        prompt_lang = ""  # one spelling for "same as the text": one key
    if "ref_audio_path" in engine.params:
        # the upstream's own folders: the ones its render-time check reads again
        own = getattr(engine, "references", None) or ReferenceFolders()  # none: refused
        params |= reference_params(own, path, aux, tenant)
        params |= {"prompt_text": prompt_text, "prompt_lang": prompt_lang}
        return {}
    if aux:
        raise UnsupportedFeature(f"engine {engine.id!r} takes one reference clip; "
                                 "omit aux_ref_audio_paths")
    if prompt_lang:
        raise UnsupportedFeature(f"engine {engine.id!r} takes no prompt_lang apart from "
                                 "text_lang; omit it")
    if not path:
        if prompt_text:
            raise InvalidParameter("prompt_text needs ref_audio_path")
        return {}
    clip = references.read(path, tenant).data
    return {"reference_audio": clip, "prompt_text": prompt_text or None}


def _paths(value: Any) -> list[str]:
    if value in (None, "", []):
        return []
    if (isinstance(value, str) or not isinstance(value, Sequence)
            or not all(isinstance(v, str) for v in value)):
        raise InvalidParameter("aux_ref_audio_paths must be a list of paths (strings)")
    return list(value)


def _speed(given: Mapping[str, Any]) -> float:
    try:
        return float(given.get("speed_factor", 1.0))
    except (TypeError, ValueError):
        raise InvalidParameter(
            f"speed_factor must be a number, got {given['speed_factor']!r}") from None


def _seed(given: Mapping[str, Any], engine: Engine) -> int | None:
    value = given.get("seed", -1)
    try:
        seed = int(str(value))
    except ValueError:
        raise InvalidParameter(f"seed must be an integer, got {value!r}") from None
    if seed != -1 and not engine.supports_seed:
        raise UnsupportedFeature(f"engine {engine.id!r} takes no seed; send -1 or omit it")
    return None if seed == -1 else seed
