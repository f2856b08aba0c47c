"""Speaker embeddings with the real resemblyzer encoder, on real voices."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from voxcache.cache import Cache
from voxcache.stages import StageCache
from voxcache.stages.embeddings import SAME_SPEAKER_THRESHOLD, SpeakerEmbeddings, same_speaker
from voxcache.testing import forked

from .conftest import espeak, pitch_shifted, wav_bytes

WORKER = Path(__file__).with_name("stage_worker.py")
COLLECTED = time.time()
"""When this module was collected: every worker collects every file before any test runs."""


def resaved(clip: bytes, fmt: str) -> bytes:
    samples, rate = soundfile.read(__import__("io").BytesIO(clip), dtype="int16")
    return wav_bytes(samples, rate, fmt=fmt, subtype="PCM_16")


def test_a_known_voice_is_encoded_once_whatever_the_file_looks_like(
        stages: StageCache, encoder, piper_clips):
    embeddings = SpeakerEmbeddings(stages, encoder)
    clip = piper_clips[0]
    first = embeddings.of(clip, tenant="acme")
    assert first.cache == "miss" and first.artifact["embedding"].shape == (256,)
    for copy in (resaved(clip, "FLAC"), resaved(clip, "WAV") + b"", clip):
        again = embeddings.of(copy, tenant="acme")
        assert (again.cache, again.key) == ("hit", first.key)
    assert embeddings.calls == 1
    stages.cache.in_process.clear()
    assert embeddings.of(resaved(clip, "FLAC"), tenant="acme").tier == "disk"
    assert embeddings.calls == 1
    assert embeddings.of(clip, tenant="other").cache == "miss"  # tenants never share


def test_same_speaker_tells_two_real_voices_apart(encoder, piper_clips, tmp_path):
    def embed(clip: bytes) -> np.ndarray:
        samples, rate = soundfile.read(__import__("io").BytesIO(clip), dtype="float32")
        return encoder.embed(samples, rate)

    joe_a, joe_b = (embed(c) for c in piper_clips)
    assert same_speaker(joe_a, joe_b)[0], same_speaker(joe_a, joe_b)
    shifted = embed(pitch_shifted(piper_clips[0], 400, tmp_path))
    assert not same_speaker(joe_a, shifted)[0], same_speaker(joe_a, shifted)
    us_a = embed(espeak("The quick brown fox jumps over the lazy dog while the weather stays "
                        "fine today.", "en-us", tmp_path))
    us_b = embed(espeak("Another sentence from the same robotic voice, spoken a second time.",
                        "en-us", tmp_path))
    female = embed(espeak("A completely different sentence spoken by a different synthetic "
                          "voice.", "en+f3", tmp_path))
    assert same_speaker(us_a, us_b)[0]
    for a, b in ((joe_a, us_a), (joe_b, female), (us_a, female)):
        verdict, score = same_speaker(a, b)
        assert not verdict and score < SAME_SPEAKER_THRESHOLD, score


def test_silence_is_refused_with_a_message(encoder):
    from voxcache.errors import BadReferenceAudio

    with pytest.raises(BadReferenceAudio, match="speech"):
        encoder.embed(np.zeros(32000, np.float32), 16000)


def test_embeddings_survive_a_restart_and_are_shared_between_processes(
        tmp_path: Path, cache_dir: Path, piper_clips, encoder):
    clip = tmp_path / "clip.wav"
    clip.write_bytes(piper_clips[1])
    other = forked.run([sys.executable, str(WORKER), str(cache_dir), str(clip),
                        str(tmp_path), "embed"], capture_output=True, text=True,
                       timeout=300, check=True)
    made = json.loads(other.stdout.strip().splitlines()[-1])
    assert made["cache"] == "miss"
    cache = Cache(cache_dir)  # this process starts after the other one ended
    try:
        embeddings = SpeakerEmbeddings(StageCache(cache))  # no encoder given or loaded
        found = embeddings.of(clip.read_bytes(), tenant="acme")
        assert (found.cache, found.tier, found.key) == ("hit", "disk", made["key"])
        assert embeddings.calls == 0 and embeddings._encoder is None
        mine = encoder.embed(*_mono(piper_clips[1]))
        assert same_speaker(found.artifact["embedding"], mine)[1] > 0.999
    finally:
        cache.close()


def _mono(clip: bytes):
    samples, rate = soundfile.read(__import__("io").BytesIO(clip), dtype="float32")
    return samples, rate


MISSING = """
import sys
sys.modules["resemblyzer"] = None  # as if the extra were not installed
from voxcache.errors import MissingDependency
from voxcache.stages.embeddings import SpeakerEncoder
try:
    SpeakerEncoder()
except MissingDependency as exc:
    print(exc)
"""


def test_without_the_extra_the_message_names_the_install_command():
    out = subprocess.run([sys.executable, "-c", MISSING], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert "pip install 'voxcache[embeddings]'" in out, out


def test_the_encoders_kernels_were_compiled_at_install() -> None:
    """librosa compiles its numba kernels on first use (~13 CPU-s): ``scripts/setup.sh``
    does it at install, so no test and no service's first voice pays for it here. A fresh
    process's encoder loads every kernel it needs from the cache, compiles none, and each
    was cached before this session began."""
    pytest.importorskip("resemblyzer")
    warm = subprocess.run(
        [sys.executable, "-c", "from voxcache.service.voice_artifacts import shared_encoder; "
         "shared_encoder()"], capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "NUMBA_DEBUG_CACHE": "1"})
    assert "data saved" not in warm.stdout, warm.stdout[-2000:]
    kernels = {Path(p) for p in re.findall(r"index loaded from '([^']+)'", warm.stdout)}
    assert kernels, "the encoder loaded no cached kernel: scripts/setup.sh warms them"
    late = sorted(k.name for k in kernels if k.stat().st_mtime >= COLLECTED - 1)
    assert not late, f"kernels compiled during this session, not at install: {late}"
