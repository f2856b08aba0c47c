"""Put the cache in front of any existing synthesis function with one decorator.

    @cached_synthesis(cache, engine_id="my-xtts", model_revision="xtts-v2.0.3")
    def speak(text: str, speed: float = 1.0, temperature: float = 0.7) -> tuple[np.ndarray, int]:
        ...

    result = speak("Hello!", temperature=0.7)   # a voxcache Result: .audio, .wav, .cache

The function's keyword parameters become the engine's declared parameters: their
defaults are resolved before keying (so ``speak("Hi")`` and ``speak("Hi",
temperature=0.7)`` share a take) and an argument the function does not take is
refused. Every parameter counts as waveform-shaping — a function cannot tell us
otherwise, and wrongly leaving one out would serve the wrong audio. The model
revision is required for the same reason: bump it when the model changes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .audio import Audio
from .cache import Cache
from .cached import CachedEngine, Result
from .engine import Engine
from .errors import EngineError
from .params import ParamSpec
from .request import ResolvedRequest, SynthesisRequest

_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str"}


def cached_synthesis(cache: Cache, *, engine_id: str, model_revision: str,
                     language: str = "en") -> Callable[[Callable[..., Any]], Callable[..., Result]]:
    """Return a decorator that caches ``fn(text, **params)`` by content."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Result]:
        engine = FunctionEngine(fn, engine_id, model_revision, language)
        cached = CachedEngine(engine, cache)

        @functools.wraps(fn)
        def wrapper(text: str, **params: Any) -> Result:
            return cached.synthesize(SynthesisRequest(text=text, params=params))

        wrapper.cached_engine = cached  # type: ignore[attr-defined]
        return wrapper

    return decorate


class FunctionEngine(Engine):
    """An engine made from a plain function's signature."""

    def __init__(self, fn: Callable[..., Any], engine_id: str, model_revision: str,
                 language: str) -> None:
        self.fn = fn
        self.id = engine_id
        self.model_revision = model_revision
        self.languages = (language,)
        self.default_language = language
        self.params = _params_from_signature(fn)

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Call the function once with the text and resolved parameters."""
        yield _to_audio(self.fn(request.text, **request.params), self.id)


def _params_from_signature(fn: Callable[..., Any]) -> dict[str, ParamSpec]:
    specs: dict[str, ParamSpec] = {}
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        if index == 0:
            continue  # the text
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
