"""GPT-SoVITS api_v2 ``/tts`` fields → a core ``SynthesisRequest``, for any engine.

Clients of GPT-SoVITS keep speaking ``/tts`` whatever engine is configured:
``text_lang`` becomes the language, ``speed_factor`` the speed, ``seed`` the
seed, ``media_type`` and ``streaming_mode`` how the answer is delivered. The
sampling fields (``top_k``, ``text_split_method`` …) reach an engine only if it
declares them — the GPT-SoVITS upstream does, under the same names. For any
other engine a field left at api_v2's default is accepted (clients often send
every field) and any other value is a 400: silently ignoring ``top_k=5`` would
serve audio rendered with settings the caller did not ask for.

``ref_audio_path`` is a path on *this* server. For the GPT-SoVITS upstream it is
passed on and keyed by content where readable (see ``upstream.gpt_sovits``);
for an embedded engine the gateway reads the clip itself and clones from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine import Engine
from ..errors import BadReferenceAudio, InvalidParameter, UnsupportedFeature
from ..request import SynthesisRequest
from .gpt_sovits import PARAMS, reference_params

MEDIA_TYPES = ("wav", "raw", "ogg", "aac")
REFERENCE_FIELDS = ("ref_audio_path", "aux_ref_audio_paths", "prompt_text", "prompt_lang")
CORE_FIELDS = ("text", "text_lang", "speed_factor", "seed", "media_type", "streaming_mode")
SAMPLING_FIELDS = tuple(name for name in PARAMS if name not in (
    "ref_audio_path", "ref_audio_id", "aux_ref_audio_paths", "aux_ref_audio_ids", "prompt_text",
    "prompt_lang", "streaming_mode"))
FIELDS = CORE_FIELDS + REFERENCE_FIELDS + SAMPLING_FIELDS
"""Every field api_v2's ``/tts`` takes."""


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


def tts_call(fields: Mapping[str, Any], engine: Engine, tenant: str = "default") -> TtsCall:
    """Map api_v2 ``/tts`` fields onto ``engine``, refusing what it cannot honour."""
    given = {k: v for k, v in fields.items() if v is not None}
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise InvalidParameter(f"/tts does not take {', '.join(unknown)}; it takes: "
                               f"{', '.join(FIELDS)}")
    text = given.get("text")
    if not text:
        raise InvalidParameter("text is required")
    media_type = str(given.get("media_type", "wav")).lower()
    if media_type not in MEDIA_TYPES:
        raise InvalidParameter(f"media_type: {media_type} is not supported; "
                               f"use one of {', '.join(MEDIA_TYPES)}")
    streaming = parse_streaming_mode(given.get("streaming_mode"))
    language = str(given["text_lang"]).lower() if given.get("text_lang") else None
    params = _sampling(given, engine)
    if "streaming_mode" in engine.params:
        params["streaming_mode"] = streaming
    reference = _reference(given, engine, language, params)
    return TtsCall(
        SynthesisRequest(text=str(text), language=language, speed=_speed(given),
                         seed=_seed(given, engine), params=params, tenant=tenant, **reference),
        media_type, streaming > 0)


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
               params: dict[str, Any]) -> dict[str, Any]:
    """Reference fields: upstream paths for GPT-SoVITS, the clip's bytes for other engines."""
    path = str(given.get("ref_audio_path") or "")
    aux = _paths(given.get("aux_ref_audio_paths"))
    prompt_text = str(given.get("prompt_text") or "")
    prompt_lang = str(given.get("prompt_lang") or "").lower()
    if prompt_lang and prompt_lang == language:
        prompt_lang = ""  # one spelling for "same as the text": one key
    if "ref_audio_path" in engine.params:
        if not path:
            raise InvalidParameter("ref_audio_path is required")
        params |= reference_params(path, aux, getattr(engine, "ref_base", None))
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
    try:
        clip = Path(path).read_bytes()
    except OSError as exc:
        raise BadReferenceAudio(f"ref_audio_path {path!r} cannot be read: "
                                f"{exc.strerror or exc}") from None
    return {"reference_audio": clip, "prompt_text": prompt_text or None}


def _paths(value: Any) -> list[str]:
    if value in (None, "", []):
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidParameter("aux_ref_audio_paths must be a list of paths")
    return [str(v) for v in value]


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
