"""Put the cache in front of any existing synthesis function with one decorator.

    @cached_synthesis(cache, engine_id="my-xtts", model_revision="xtts-v2.0.3",
                      language="ja", voice="anna", tenant="shop-12", segments=True)
    def speak(text: str, speed: float = 1.0) -> tuple[np.ndarray, int]: ...

The function's keyword parameters become the engine's declared parameters (defaults
filled in before keying, every one waveform-shaping); the model revision and the
language are required, never guessed. docs/internals/segments.md and README.md have the options.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .audio import Audio
from .cache import Cache
from .cached import CachedEngine, Result
from .engine import Engine
from .engines.sentences import split_sentences
from .errors import EngineError
from .params import ParamSpec
from .request import ResolvedRequest, SynthesisRequest, resolve

_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str"}


def cached_synthesis(cache: Cache, *, engine_id: str, model_revision: str,
                     language: str | None = None, languages: Sequence[str] = (),
                     voice: str | None = None, tenant: str = "default",
                     segments: bool = False, segment_gap: float = 0.0,
                     ) -> Callable[[Callable[..., Any]], Callable[..., Result]]:
    """Return a decorator that caches ``fn(text, **params)`` by content (options: the
    module docstring)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Result]:
        engine = FunctionEngine(fn, engine_id, model_revision, language=language,
                                languages=languages, voice=voice, segments=segments,
                                segment_gap=segment_gap)
        resolve(SynthesisRequest(text="a", tenant=tenant), engine)  # refuse a bad tenant now
        cached = CachedEngine(engine, cache, segments=segments)

        @functools.wraps(fn)
        def wrapper(text: str, **params: Any) -> Result:
            spoken = params.pop("language", None)
            return cached.synthesize(SynthesisRequest(text=text, language=spoken,
                                                      tenant=tenant, params=params))

        wrapper.cached_engine = cached  # type: ignore[attr-defined]
        return wrapper

    return decorate


class FunctionEngine(Engine):
    """An engine made from a plain function's signature."""

    def __init__(self, fn: Callable[..., Any], engine_id: str, model_revision: str, *,
                 language: str | None, languages: Sequence[str] = (),
                 voice: str | None = None, segments: bool = False,
                 segment_gap: float = 0.0) -> None:
        self.fn = fn
        self.id = engine_id
        self.model_revision = model_revision
        signature = inspect.signature(fn)
        self._takes_language = "language" in signature.parameters
        declared = _declared_languages(fn, signature, language, languages)
        self._spelling: dict[str, str] = {}
        for name in declared:  # canonical tag → the spelling the function declared first
            self._spelling.setdefault(_canonical(name), name)
        self.languages = tuple(self._spelling)
        self.default_language = self.languages[0]
        self.params = _params_from_signature(fn, signature)
        if voice is not None:
            if not isinstance(voice, str) or not voice.strip():
                raise TypeError(f"{fn.__name__}: voice must be a non-empty name")
            if "voice" in self.params:
                raise TypeError(
                    f"{fn.__name__}: voice={voice!r} given, but the function takes a voice "
                    "parameter (keyed as a parameter): keep one of the two")
            self.voices = {voice: voice}
            self.default_voice = voice
        if segment_gap < 0:
            raise TypeError(f"{fn.__name__}: segment_gap must be 0 or more seconds")
        self._segmented = segments
        self.segment_gap = float(segment_gap)

    def split_sentences(self, text: str) -> list[str] | None:
        """With ``segments``, the split ``render`` calls the function on; else None."""
        return split_sentences(text) if self._segmented else None

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Call the function once on the text, or once per sentence with ``segments``."""
        extra = dict(request.params)
        if self._takes_language:
            extra["language"] = self._spelling[request.language]
        for text in (split_sentences(request.text) if self._segmented else [request.text]):
            yield _to_audio(self.fn(text, **extra), self.id)


def _canonical(language: str) -> str:
    """The resolver's spelling of a language tag (``ja_JP`` → ``ja-jp``)."""
    return language.strip().lower().replace("_", "-")


def _declared_languages(fn: Callable[..., Any], signature: inspect.Signature,
                        option: str | None, others: Sequence[str]) -> list[str]:
    """The function's languages, its default first: from its ``language`` parameter's
    default or the ``language`` option (equal if both), never guessed."""
    param = signature.parameters.get("language")
    own = param.default if param is not None and isinstance(param.default, str) else None
    for name in (own, option, *others):
        if name is not None and (not isinstance(name, str) or not _canonical(name)):
            raise TypeError(f"{fn.__name__}: a language must be a non-empty tag, not {name!r}")
    if own is not None and option is not None and _canonical(own) != _canonical(option):
        raise TypeError(
            f"{fn.__name__}: language={option!r} given, but its language parameter defaults "
            f"to {own!r}: keep one of the two")
    default = own if own is not None else option
    if default is None:
        raise TypeError(
            f"{fn.__name__}: say which language it speaks — cached_synthesis(..., "
            "language='ja'), or a default for its language parameter; voxcache does not "
            "guess (a wrong language would key one language's audio as another's)")
    if others and param is None:
        raise TypeError(
            f"{fn.__name__}: languages={tuple(others)!r} given, but the function takes no "
            "language parameter, so it could not hear which one to speak")
    return [default, *others]


def _params_from_signature(fn: Callable[..., Any],
                           signature: inspect.Signature) -> dict[str, ParamSpec]:
    specs: dict[str, ParamSpec] = {}
    for index, param in enumerate(signature.parameters.values()):
        if index == 0 or param.name == "language":
            continue  # the text; the language is the request's own field
        kind = _TYPE_NAMES.get(type(param.default))
        if param.default is inspect.Parameter.empty or kind is None:
            raise TypeError(
                f"{fn.__name__}: parameter {param.name!r} needs a bool/int/float/str default "
                "so voxcache can resolve and key it")
        specs[param.name] = ParamSpec(param.name, kind, param.default)
    return specs


def _to_audio(value: Any, engine_id: str) -> Audio:
    if isinstance(value, Audio):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        samples, rate = value
        array = np.asarray(samples)
        if array.dtype == np.int16:
            return Audio(array.astype("<i2").tobytes(), int(rate))
        return Audio.from_float(array, int(rate))
    raise EngineError(f"{engine_id}: return an Audio or (samples, sample_rate), not "
                      f"{type(value).__name__}")
