"""The decorator puts the cache in front of any synthesis function."""

from __future__ import annotations

import numpy as np
import pytest

from voxcache.decorator import cached_synthesis
from voxcache.errors import InvalidParameter


def test_wrapped_function_renders_once_per_distinct_call(cache):
    calls = []

    @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", language="en")
    def speak(text: str, temperature: float = 0.7, voice: str = "anna") -> tuple:
        calls.append((text, temperature, voice))
        # a second of tone, its pitch from the text (a constant or silence would be a take
        # the storing gate refuses: DC, silence)
        return 0.3 * np.sin(np.arange(16000) * len(text) / 100, dtype=np.float32), 16000

    first = speak("Hello there")
    assert first.cache == "miss"
    assert speak("Hello   there", temperature=0.7).cache == "hit"  # explicit default
    assert speak("Hello there", temperature=0.8).cache == "miss"
    assert speak("Hello there", voice="ben").cache == "miss"
    assert len(calls) == 3
    assert first.audio.sample_rate == 16000


def test_wrapped_function_rejects_unknown_arguments(cache):
    @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", language="en")
    def speak(text: str, temperature: float = 0.7):
        return np.zeros(10, dtype=np.int16), 16000

    with pytest.raises(InvalidParameter, match="accepts: temperature"):
        speak("hi", top_k=5)


def test_model_revision_separates_takes(cache):
    def make(revision):
        @cached_synthesis(cache, engine_id="my-tts", model_revision=revision, language="en")
        def speak(text: str):
            return (np.sin(np.arange(8000) / 7.0) * 9000).astype(np.int16), 16000

        return speak

    assert make("v1")("hi").cache == "miss"
    assert make("v1")("hi").cache == "hit"
    assert make("v2")("hi").cache == "miss"


def test_parameters_without_usable_defaults_are_refused_at_decoration(cache):
    with pytest.raises(TypeError, match="needs a bool/int/float/str default"):
        @cached_synthesis(cache, engine_id="x", model_revision="v1", language="en")
        def speak(text: str, reference):
            return np.zeros(10, dtype=np.int16), 16000
