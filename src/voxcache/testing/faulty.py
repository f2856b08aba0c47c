"""A stand-in engine that renders speech-like takes, good or broken on request.

``FaultyEngine``'s ``fault`` parameter (keyed, so each fault is its own take) makes what
the quality gate is there for: runaway output, truncation, silence, clipping, NaN, a DC
offset, a long pause — applied to a speech-shaped tone or, with ``base="piper"``, to
Piper's real speech (docs/operating/admission.md's figures).

    voxcache --engine voxcache.testing.faulty:FaultyEngine serve
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..audio import Audio
from ..engine import Engine
from ..params import ParamSpec
from ..policies.admit.quality import syllables
from ..resolved import ResolvedRequest

FAULTS = ("none", "runaway", "truncated", "silent", "clipped", "nonfinite", "dc", "gap",
          "flaky")
"""``flaky``: runaway the first time a text is rendered, good after (``on_fail = retry``)."""
SYLLABLES_PER_SECOND = 4.5


class FaultyEngine(Engine):
    """Speech-like takes with the fault a request asks for."""

    id = "faulty"
    sample_rate = 16000
    params = {"fault": ParamSpec("fault", "str", "none", choices=FAULTS,
                                 doc="what goes wrong with the take")}
    languages = ("en-us", "zh")
    default_language = "en-us"
    voices = {"plain": "plain"}
    default_voice = "plain"
    determinism = "deterministic"
    speech = True

    def __init__(self, base: str = "synthetic", model_revision: str = "faulty-1") -> None:
        self.model_revision = model_revision
        self.base = base
        self.calls: list[str] = []
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._piper: Any = None
        if base == "piper":
            from ..engines import load_engine

            self._piper = load_engine("piper")
            self.sample_rate = self._piper.sample_rate
            self.languages = self._piper.languages
            self.default_language = self._piper.default_language

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """One take (the whole text), good or with the fault asked for."""
        fault = str(request.params["fault"])
        with self._lock:
            self.calls.append(request.text)
            first = request.text not in self._seen
            self._seen.add(request.text)
        if fault == "flaky":
            fault = "runaway" if first else "none"
        good = self._good(request)
        yield broken(good, fault, self.sample_rate)

    def _good(self, request: ResolvedRequest) -> np.ndarray:
        if self._piper is not None:
            from dataclasses import replace

            from ..engine import render_chunks

            plain = replace(request, engine_id=self._piper.id, params={
                name: spec.default for name, spec in self._piper.params.items()})
            audio = Audio.join(list(render_chunks(self._piper, plain)))
            return audio.samples().astype(np.float32) / 32768.0
        low, high = syllables(request.text)
        seconds = max(0.3, (low + high) / 2 / SYLLABLES_PER_SECOND / request.speed)
        t = np.arange(int(seconds * self.sample_rate)) / self.sample_rate
        envelope = 0.55 + 0.45 * np.sin(2 * np.pi * SYLLABLES_PER_SECOND * t)
        return (0.5 * envelope * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


def broken(good: np.ndarray, fault: str, rate: int) -> Audio:
    """``good`` (float samples) with ``fault`` applied, as a take."""
    if fault == "runaway":  # vllm-omni 3510: the same text, ten times as long
        samples = np.tile(good, 10)
    elif fault == "truncated":
        samples = good[: max(1, good.size // 5)]
    elif fault == "silent":
        samples = np.zeros_like(good)
    elif fault == "clipped":
        samples = np.clip(good * 8.0, -1.0, 1.0)
    elif fault == "nonfinite":
        samples = good.copy()
        samples[samples.size // 3: samples.size // 3 + 64] = np.nan
    elif fault == "dc":
        samples = np.clip(good * 0.5 + 0.3, -1.0, 1.0)
    elif fault == "gap":
        middle = good.size // 2
        samples = np.concatenate([good[:middle], np.zeros(int(5.0 * rate), np.float32),
                                  good[middle:]])
    else:
        samples = good
    return Audio.from_float(samples, rate)
