"""Fixtures for the stage caches: real voices (Piper, espeak-ng, sox), a stage cache, the
real speaker encoder (loaded once per session)."""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.request import SynthesisRequest
from voxcache.stages import StageCache

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}
"""Piper parameters under which its output is byte-identical run to run."""
PIPER_LINES = (
    "The quick brown fox jumps over the lazy dog while the weather stays fine today.",
    "Another sentence, spoken by the same voice, about trains leaving the station at noon.",
)


@pytest.fixture
def stages(cache: Cache) -> StageCache:
    return StageCache(cache, lock_wait=30)


@pytest.fixture(scope="session")
def piper_clips(piper, tmp_path_factory) -> list[bytes]:
    """Two sentences in Piper's joe voice, as plain WAV files (3–10 s each)."""
    cached = CachedEngine(piper, Cache(tmp_path_factory.mktemp("piper-cache")))
    clips = []
    for line in PIPER_LINES:
        audio = cached.synthesize(SynthesisRequest(line, params=DETERMINISTIC)).audio
        clips.append(wav_bytes(audio.samples().astype(np.float32) / 32768, audio.sample_rate))
    cached.cache.close()
    return clips


def wav_bytes(samples: np.ndarray, rate: int, fmt: str = "WAV", subtype: str = "PCM_16"
              ) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def espeak(text: str, voice: str, tmp: Path) -> bytes:
    """A clip from espeak-ng (skips where it is not installed)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    out = tmp / f"{voice.replace('+', '_')}-{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(out), text], check=True)
    return out.read_bytes()


def pitch_shifted(clip: bytes, cents: int, tmp: Path) -> bytes:
    """The clip through sox's pitch effect (another voice made from the same speech)."""
    if shutil.which("sox") is None:
        pytest.skip("sox is not installed")
    src, dst = tmp / "in.wav", tmp / f"pitch{cents}.wav"
    src.write_bytes(clip)
    subprocess.run(["sox", str(src), str(dst), "pitch", str(cents)], check=True)
    return dst.read_bytes()


@pytest.fixture(scope="session")
def encoder():
    """resemblyzer's encoder (skips without the [embeddings] extra)."""
    pytest.importorskip("resemblyzer", reason="needs the [embeddings] extra")
    import torch

    from voxcache.stages.embeddings import SpeakerEncoder

    torch.set_num_threads(1)
    return SpeakerEncoder()


@pytest.fixture
def ref_wav(tmp_path: Path, piper_clips: list[bytes]) -> Iterator[Path]:
    path = tmp_path / "ref.wav"
    path.write_bytes(piper_clips[0])
    yield path
