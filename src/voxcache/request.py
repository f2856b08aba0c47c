"""A synthesis request, and its resolution against one engine.

Resolution is where every input is put into its one canonical spelling before
it is hashed: text normalised (NFC, whitespace folded — nothing an engine can
hear), the voice alias mapped to its canonical name, reference audio reduced to
a content fingerprint, parameters typed and defaulted. Two requests that must
give the same audio resolve to equal objects; any field the engine cannot
honour is refused here rather than ignored.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .audio import fingerprint_reference
from .engine import Engine
from .errors import InvalidParameter, UnknownVoice, UnsupportedFeature
from .params import resolve_params
from .resolved import ResolvedRequest as ResolvedRequest  # re-exported: engines import it here
from .tensors import tensor_voice

DEFAULT_MAX_TEXT_CHARS = 5000
SPEED_RANGE = (0.25, 4.0)

_UNSPEAKABLE = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff]")
"""Control characters (Unicode category Cc) and lone surrogates (Cs). The controls that are
Unicode whitespace — tab, line feed, vertical tab, form feed, carriage return, U+0085 — are
not here: normalisation folds them like spaces. The rest reach no engine intact (Piper's
phonemizer raises on U+0000; a lone surrogate cannot even be encoded as UTF-8)."""

_SILENT_CATEGORIES = ("P", "Z", "M", "Cc", "Cf", "Cs")
"""Unicode categories no engine reads as a word: punctuation, separators, combining marks
without a base, controls and format characters. Letters and digits in any script, and
symbols (``$``, ``+``, ``©``, emoji — engines read those by name), count as speakable; so
do unassigned and private-use code points, which may be newer letters or emoji than this
Python's Unicode tables know."""


def normalize_text(text: str) -> str:
    """Fold what no engine can hear: Unicode form (NFC) and runs of whitespace."""
    return " ".join(unicodedata.normalize("NFC", text).split())


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """What a caller asks for. Every field that shapes the audio is part of the key."""

    text: str
    voice: str | None = None
    reference_audio: bytes | None = None
    """Raw bytes of a reference clip (WAV/FLAC/OGG) for voice cloning."""
    prompt_text: str | None = None
    """What is spoken in the reference clip."""
    language: str | None = None
    instruct: str | None = None
    seed: int | None = None
    """Explicit seed; ``None`` or -1 means "unseeded" (the seed policy applies)."""
    speed: float = 1.0
    params: Mapping[str, Any] = field(default_factory=dict)
    tenant: str = "default"
    ttl: float | None = None
    """Seconds this take may be served; ``None`` keeps it until evicted."""
    seed_policy: str | None = None
    """For unseeded requests: ``pin``, ``bypass``, ``variants:N`` (``None``: the server's)."""
    voice_tensor: Any = None
    """A voice that is an array (NumPy or torch: a style vector, a speaker embedding), for
    engines that take tensor voices; keyed by its content."""
    caller: str | None = None
    """Who asks (an API key, a session id…), for ``[admission] admit_after``: not part of
    the key, never stored as given (only a hash of it, while it counts)."""


def resolve(
    request: SynthesisRequest, engine: Engine, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
) -> ResolvedRequest:
    """Validate ``request`` against ``engine`` and return its canonical form."""
    text = _resolve_text(request.text, max_text_chars)
    reference, prompt_text = _resolve_reference(request, engine)
    tensor, voice = _resolve_tensor_voice(request, engine)
    if voice is None and reference is None:
        voice = _resolve_voice(request.voice, engine)
    return ResolvedRequest(
        engine_id=engine.id,
        model_revision=engine.model_revision,
        tenant=_resolve_tenant(request.tenant),
        text=text,
        voice=voice,
        reference_fingerprint=reference,
        prompt_text=prompt_text,
        language=_resolve_language(request.language, engine),
        instruct=_resolve_instruct(request.instruct, engine),
        seed=_resolve_seed(request.seed),
        speed=_resolve_speed(request.speed),
        params=resolve_params(engine.params, _refuse_non_finite(request.params), engine.id),
        reference_audio=request.reference_audio,
        ttl=_resolve_ttl(request.ttl),
        voice_tensor=tensor,
    )


def _resolve_text(text: str, limit: int) -> str:
    if not isinstance(text, str):
        raise InvalidParameter("text must be a string")
    _refuse_control_characters("text", text)
    normalized = normalize_text(text)
    if not normalized:
        raise InvalidParameter("text is empty: send at least one word to speak")
    if len(normalized) > limit:
        raise InvalidParameter(
            f"text is {len(normalized)} characters; the limit is {limit} — split it into "
            "several requests"
        )
    if all(unicodedata.category(char).startswith(_SILENT_CATEGORIES) for char in normalized):
        raise InvalidParameter(
            f"text has nothing to speak: {normalized[:40]!r} is only punctuation and spaces; "
            "send at least one letter, digit or symbol"
        )
    return normalized


def _refuse_control_characters(name: str, text: str) -> None:
    """Refuse a character no engine can take, naming it and where it is (0-based)."""
    found = _UNSPEAKABLE.search(text)
    if found is not None:
        kind = "an unpaired surrogate" if "\ud800" <= found.group() <= "\udfff" else \
            "the control character"
        raise InvalidParameter(
            f"{name} contains {kind} U+{ord(found.group()):04X} at position {found.start()} "
            "(counting from 0); remove it — only tabs and line breaks may appear besides "
            "printable characters"
        )


def _resolve_voice(voice: str | None, engine: Engine) -> str | None:
    if voice is None or voice == "":
        return engine.default_voice
    canonical = engine.voices.get(voice)
    if canonical is None:
        known = ", ".join(sorted(set(engine.voices))) or "none"
        raise UnknownVoice(f"unknown voice {voice!r} for engine {engine.id!r}; known: {known}")
    return canonical


TENSOR_VOICE_PREFIX = "tensor:"
"""A tensor voice's canonical name (in keys and envelopes): the prefix and its fingerprint."""


def _resolve_tensor_voice(request: SynthesisRequest, engine: Engine) -> tuple[Any, str | None]:
    """(the canonical array, ``tensor:<fingerprint>``) of a tensor voice, or (None, None)."""
    if request.voice_tensor is None:
        return None, None
    spec = engine.tensor_voice
    if spec is None:
        raise UnsupportedFeature(
            f"engine {engine.id!r} takes no tensor voices (it takes: "
            f"{', '.join(engine.voice_kinds)}); name one of its voices instead")
    if request.voice or request.reference_audio is not None:
        raise InvalidParameter("send one voice: a tensor voice, a voice name or reference "
                               "audio, not several")
    try:
        array, fingerprint = tensor_voice(request.voice_tensor, spec.shape, spec.dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"tensor voice for engine {engine.id!r}: {exc}") from None
    return array, TENSOR_VOICE_PREFIX + fingerprint


def _resolve_reference(request: SynthesisRequest, engine: Engine) -> tuple[str | None, str | None]:
    if request.reference_audio is None:
        if request.prompt_text:
            raise InvalidParameter("prompt_text is only meaningful with reference audio")
        return None, None
    if not engine.supports_reference:
        raise UnsupportedFeature(
            f"engine {engine.id!r} cannot clone a voice from reference audio; name one of its "
            "voices instead"
        )
    if request.prompt_text:
        _refuse_control_characters("prompt_text", request.prompt_text)
    ref = fingerprint_reference(request.reference_audio)
    prompt = normalize_text(request.prompt_text) if request.prompt_text else None
    return ref.fingerprint, prompt


def _resolve_language(language: str | None, engine: Engine) -> str:
    if not language:
        return engine.default_language
    canonical = language.strip().lower().replace("_", "-")
    if canonical in engine.languages:
        return canonical
    # "en" means the engine's one English variant, if it has exactly one.
    same_primary = [lang for lang in engine.languages if lang.split("-")[0] == canonical]
    if len(same_primary) == 1:
        return same_primary[0]
    raise UnsupportedFeature(
        f"engine {engine.id!r} does not speak language {language!r}; it speaks: "
        f"{', '.join(engine.languages)}"
    )


def _resolve_instruct(instruct: str | None, engine: Engine) -> str | None:
    if not instruct:
        return None
    if not engine.supports_instruct:
        raise UnsupportedFeature(
            f"engine {engine.id!r} does not take instructions (instruct/style); remove the field"
        )
    _refuse_control_characters("instruct", instruct)
    return normalize_text(instruct)


def _resolve_seed(seed: int | None) -> int | None:
    if seed is None or seed == -1:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InvalidParameter(f"seed must be an integer from 0 to 2**63-1 (or -1), got {seed!r}")
    return seed


def _resolve_speed(speed: float) -> float:
    value = _finite(speed)
    if value is None:
        raise InvalidParameter(f"speed must be a finite number, got {_shown(speed)}")
    low, high = SPEED_RANGE
    if not low <= value <= high:
        raise InvalidParameter(f"speed must be between {low} and {high}, got {speed}")
    return value + 0.0


def _resolve_tenant(tenant: str) -> str:
    if not tenant or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", tenant):
        raise InvalidParameter(f"tenant id {tenant!r} must be 1-64 of A-Z a-z 0-9 _ . -")
    return tenant


def _resolve_ttl(ttl: float | None) -> float | None:
    """A finite, positive number of seconds: ``NaN`` and ``Infinity`` (which Python's JSON
    parser accepts) would be written into the envelope as JSON no parser reads back."""
    if ttl is None:
        return None
    value = _finite(ttl)
    if value is None or value <= 0:
        raise InvalidParameter(
            f"ttl must be a positive, finite number of seconds, got {_shown(ttl)}")
    return value


def _refuse_non_finite(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A number sent as ``NaN``, ``Infinity`` or beyond any float is refused here, by name."""
    if not isinstance(params, Mapping):
        raise InvalidParameter(f"params must be an object of name: value, got {_shown(params)}")
    for name, value in params.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and \
                _finite(value) is None:
            raise InvalidParameter(
                f"parameter {name!r} must be a finite number, got {_shown(value)}")
    return params


def _finite(value: object) -> float | None:
    """``value`` as a finite float; None for bools, non-numbers, NaN, ±Infinity and integers
    too large for a float (``math.isfinite`` would raise on those)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


def _shown(value: object) -> str:
    """A caller's value for an error message, cut short (a 400-digit integer is not helpful)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def memo_identity(request: SynthesisRequest) -> tuple[Any, ...] | None:
    """A hashable identity of a request, or None when it should not be memoised."""
    if request.reference_audio is not None or request.voice_tensor is not None:
        return None
    try:
        params = tuple(sorted((k, type(v), v) for k, v in request.params.items()))
        identity = (request.text, request.voice, request.language, request.instruct,
                    type(request.seed), request.seed, type(request.speed), request.speed,
                    params, request.tenant, request.ttl)
        hash(identity)
    except TypeError:
        return None
    return identity
