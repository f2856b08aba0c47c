"""StyleTone: an engine written outside voxcache, as a third party writes one.

Its voices are style vectors (256 float32 values, the size of a speaker embedding): a
named voice is a vector from its voices file, and any vector of that shape is a voice
(``tensor_voice``). It pauses 0.25 s between sentences, which it splits with voxcache's
splitter (English and Japanese); an explicit seed makes a render repeat (without one, the
phase is drawn at random); it keeps a scratch buffer per engine, so its renders must not
run at once.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import blake3
import numpy as np

from voxcache.audio import Audio
from voxcache.engine import Engine, TensorVoice
from voxcache.engines.sentences import split_sentences
from voxcache.params import ParamSpec
from voxcache.resolved import ResolvedRequest

WIDTH = 256


def default_voices() -> dict[str, list[float]]:
    """The voices file shipped with the package: name -> style vector."""
    return json.loads(resources.files(__package__).joinpath("voices.json").read_text())


class StyleToneEngine(Engine):
    """Tones shaped by a style vector, one per sentence."""

    id = "styletone"
    sample_rate = 16000
    languages = ("en", "ja")
    default_language = "en"
    supports_seed = True
    determinism = "seeded"
    concurrent_renders = False
    speech = False  # tones, 83 characters a second: the quality gate's speech checks do not apply
    segment_gap = 0.25
    tensor_voice = TensorVoice((WIDTH,), "float32")
    params = {
        "brightness": ParamSpec("brightness", "float", 0.5, minimum=0.0, maximum=1.0,
                                doc="how many overtones"),
        "chunk_ms": ParamSpec("chunk_ms", "int", 20, shapes_waveform=False, minimum=1,
                              maximum=1000, doc="scratch buffer size (does not shape audio)"),
    }

    def __init__(self, voices: str | None = None) -> None:
        raw = Path(voices).read_bytes() if voices else resources.files(
            __package__).joinpath("voices.json").read_bytes()
        table = json.loads(raw)
        self._vectors = {name: np.asarray(v, dtype="<f4") for name, v in table.items()}
        self.voices = {name: name for name in self._vectors}
        self.default_voice = sorted(self._vectors)[0]
        self.model_revision = f"styletone-1.0.0+{blake3.blake3(raw).hexdigest()[:16]}"
        self._scratch = np.zeros(16000, dtype=np.float64)

    def split_sentences(self, text: str) -> list[str] | None:
        return split_sentences(text)

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        style = request.voice_tensor
        if style is None:
            style = self._vectors[request.voice or self.default_voice]
        seed = request.seed if request.seed is not None else secrets.randbits(32)
        for sentence in self.split_sentences(request.text) or []:
            # the sentence's own seed: the same sentence sounds the same wherever it stands
            own = int.from_bytes(blake3.blake3(f"{seed}|{sentence}".encode()).digest()[:4],
                                 "little")
            yield self._tone(sentence, np.asarray(style, dtype=np.float64), own,
                             float(request.params["brightness"]), request.speed)

    def _tone(self, sentence: str, style: np.ndarray, seed: int, brightness: float,
              speed: float) -> Audio:
        frames = max(160, int(len(sentence) * 0.012 * self.sample_rate / speed))
        if len(self._scratch) < frames:
            self._scratch = np.zeros(frames, dtype=np.float64)
        buffer = self._scratch[:frames]  # shared scratch: why renders run one at a time
        buffer[:] = 0.0
        t = np.arange(frames) / self.sample_rate
        base = 140.0 + 300.0 / (1.0 + np.exp(-float(style[:32].mean()) * 4.0))
        phase = np.random.default_rng(seed).uniform(0, 2 * np.pi)
        for k in range(1, 2 + int(brightness * 6)):
            weight = 1.0 / k * (1.0 + 0.5 * float(np.tanh(style[k % WIDTH])))
            buffer += weight * np.sin(2 * np.pi * base * k * t + phase * k)
        peak = float(np.max(np.abs(buffer))) or 1.0
        return Audio.from_float(0.4 * buffer / peak, self.sample_rate)
