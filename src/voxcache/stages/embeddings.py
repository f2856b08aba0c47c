"""Speaker embeddings with a real encoder (resemblyzer), cached like any stage.

resemblyzer ships its encoder's weights in its wheel (nothing is downloaded); an embedding
is 256 L2-normalised float32 values, hundreds of milliseconds to compute on a CPU and
microseconds to read from memory. The weights load through torch's weights-only loader;
what voxcache stores is safetensors, never pickle.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import blake3
import numpy as np

from ..errors import BadReferenceAudio, MissingDependency
from .cache import StageCache, StageResult, stage_cached
from .clip import Clip
from .keys import DEFAULT_TENANT

INSTALL_HINT = "pip install 'voxcache[embeddings]'"
SAME_SPEAKER_THRESHOLD = 0.80
"""Cosine similarity at or above which two resemblyzer embeddings count as one speaker.

Measured here (docs/internals/stages.md): two sentences of one voice score 0.92 (Piper's
joe, and espeak-ng's en-us alike); different voices 0.44–0.73 (Piper against
espeak-ng, espeak-ng's en-us against its en+f3 variant, Piper against itself
pitch-shifted by sox). 0.80 sits between, with margin on both sides; raise it
where a false "same" costs more than a false "different"."""
MIN_SPEECH_SECONDS = 0.5


class SpeakerEncoder:
    """resemblyzer's pretrained ``VoiceEncoder`` on the CPU, loaded once per instance."""

    id = "resemblyzer"

    def __init__(self, device: str = "cpu") -> None:
        try:
            import resemblyzer
            from resemblyzer import VoiceEncoder, preprocess_wav
        except ImportError as exc:
            raise MissingDependency(
                f"speaker embeddings need the [embeddings] extra ({exc.name or exc} is not "
                f"importable): {INSTALL_HINT} (resemblyzer, torch 2.13.0 CPU)") from None
        self._preprocess = preprocess_wav
        self._model = VoiceEncoder(device, verbose=False)
        self._lock = threading.Lock()
        self.revision = _revision(resemblyzer.__file__)

    def embed(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """The (256,) float32 embedding of mono float samples; refuses a clip without
        enough speech (resemblyzer trims long silences first)."""
        samples = np.asarray(samples, dtype=np.float32)
        audible = samples.size and float(np.abs(samples).max()) > 1e-4
        speech = self._preprocess(samples, source_sr=sample_rate) if audible else samples[:0]
        if len(speech) < MIN_SPEECH_SECONDS * 16000:
            raise BadReferenceAudio(
                f"the reference clip holds {len(speech) / 16000:.2f} s of speech after "
                f"silence is trimmed; send at least {MIN_SPEECH_SECONDS} s of someone speaking")
        with self._lock:  # one LSTM, one caller at a time: torch already uses every core
            return np.asarray(self._model.embed_utterance(speech), dtype=np.float32)


class SpeakerEmbeddings:
    """Embeddings of reference clips, cached by the clip's content, tenant-scoped."""

    def __init__(self, stages: StageCache, encoder: SpeakerEncoder | None = None) -> None:
        self.stages = stages
        self._encoder = encoder
        self._encoder_lock = threading.Lock()
        self.calls = 0
        """Times the encoder really ran (what a test counts)."""
        self.embed = stage_cached(stages, kind="embedding", extractor=SpeakerEncoder.id,
                                  revision=self.revision)(self._encode)

    @property
    def encoder(self) -> SpeakerEncoder:
        """The encoder, loaded on first use (a process that only serves hits never loads
        torch's model)."""
        with self._encoder_lock:
            if self._encoder is None:
                self._encoder = SpeakerEncoder()
            return self._encoder

    @property
    def revision(self) -> str:
        """The encoder's revision, known without loading the model."""
        if self._encoder is not None:
            return self._encoder.revision
        return _installed_revision()

    def of(self, clip: bytes | Clip, tenant: str = DEFAULT_TENANT) -> StageResult:
        """The clip's embedding (tensor ``embedding``, shape (256,)), computed at most once
        per tenant, clip content and encoder revision."""
        return self.embed(clip, tenant=tenant)

    def _encode(self, clip: Clip) -> dict[str, np.ndarray]:
        self.calls += 1
        return {"embedding": self.encoder.embed(clip.mono(), clip.sample_rate)}


def cosine(a: Any, b: Any) -> float:
    """Cosine similarity of two embeddings (any shape; flattened)."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    if x.shape != y.shape or norm == 0.0:
        raise ValueError("embeddings must have one shape and be non-zero")
    return float(x @ y / norm)


def same_speaker(a: Any, b: Any, threshold: float = SAME_SPEAKER_THRESHOLD
                 ) -> tuple[bool, float]:
    """(verdict, similarity): whether two embeddings are one speaker's."""
    score = cosine(a, b)
    return score >= threshold, score


def _installed_revision() -> str:
    spec = importlib.util.find_spec("resemblyzer")  # locates it without importing torch
    if spec is None or spec.origin is None:
        raise MissingDependency(f"speaker embeddings need the [embeddings] extra: {INSTALL_HINT}")
    return _revision(spec.origin)


_revisions: dict[str, str] = {}


def _revision(package_init: str) -> str:
    """``resemblyzer-<version>-<BLAKE3 of its weights>``: new weights are a new key."""
    if package_init not in _revisions:
        from importlib.metadata import version

        weights = Path(package_init).with_name("pretrained.pt")
        try:
            digest = blake3.blake3(weights.read_bytes()).hexdigest()[:16]
        except OSError:
            raise MissingDependency(f"resemblyzer's weights are missing at {weights}; "
                                    f"reinstall: {INSTALL_HINT}") from None
        _revisions[package_init] = f"resemblyzer-{version('resemblyzer')}-{digest}"
    return _revisions[package_init]
