"""A tiny deterministic engine for tests and demos: tones instead of speech.

Every input that the key covers changes the tone, so a test can tell takes
apart by their samples; ``calls`` records what reached the engine (the last
``CALLS_KEPT``: a server running it for hours must not grow), so a test can count
renders. It renders sentence by sentence like a real engine, and ``delay`` stands in
for model time without changing the samples.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import blake3
import numpy as np

from ..audio import Audio
from ..engine import Engine
from ..params import ParamSpec
from ..request import ResolvedRequest
from .sentences import split_sentences

CALLS_KEPT = 4096
"""``calls`` keeps the most recent renders only (the soak found it growing per new key)."""


class ToneEngine(Engine):
    """Sine tones whose pitch and phase follow every waveform-shaping input."""

    id = "tone"
    sample_rate = 16000
    params = {
        "pitch": ParamSpec("pitch", "float", 1.0, minimum=0.25, maximum=4.0,
                           doc="pitch multiplier"),
        "delay": ParamSpec("delay", "float", 0.0, shapes_waveform=False, minimum=0.0,
                           maximum=60.0, doc="seconds of simulated model time per sentence"),
    }
    languages = ("en-us", "zh", "ja")
    default_language = "en-us"
    voices = {"alto": "alto", "bass": "bass"}
    default_voice = "alto"
    supports_reference = True
    supports_instruct = True
    supports_seed = True
    determinism = "deterministic"
    clause_safe = True  # a tone is a function of its text alone
    speech = False  # tones at 100 characters a second: the gate's speech checks do not apply

    def __init__(self, model_revision: str = "tone-1", seconds_per_char: float = 0.01) -> None:
        self.model_revision = model_revision
        self.seconds_per_char = seconds_per_char
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def split_sentences(self, text: str) -> list[str] | None:
        """The same split ``render`` uses: each tone depends on its sentence alone."""
        return split_sentences(text)

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Yield one tone per sentence."""
        with self._lock:
            self.calls.append(request.text)
            if len(self.calls) > CALLS_KEPT:
                del self.calls[0]
        for sentence in split_sentences(request.text):
            time.sleep(float(request.params["delay"]))
            yield self._tone(sentence, request)

    def _tone(self, sentence: str, request: ResolvedRequest) -> Audio:
        identity = "|".join(str(x) for x in (
            sentence, request.voice, request.reference_fingerprint, request.prompt_text,
            request.instruct, request.seed, request.language, self.model_revision))
        seed = int.from_bytes(blake3.blake3(identity.encode()).digest()[:4], "little")
        frequency = (200 + seed % 600) * float(request.params["pitch"])
        frames = max(1, int(len(sentence) * self.seconds_per_char * self.sample_rate
                            / request.speed))
        t = np.arange(frames) / self.sample_rate
        wave = 0.5 * np.sin(2 * np.pi * frequency * t + (seed >> 16) / 65536 * np.pi)
        return Audio.from_float(wave, self.sample_rate)
