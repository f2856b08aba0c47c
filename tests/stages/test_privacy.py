"""Privacy mode: only derived artifacts are kept; no byte of the clip is anywhere in the folder."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile

from voxcache.protocols.cosyvoice.prompts import CosyVoicePrompts
from voxcache.protocols.gpt_sovits.prompts import GPTSoVITSPrompts
from voxcache.stages import StageCache
from voxcache.stages.embeddings import SpeakerEmbeddings
from voxcache.tiers.index import Index

torch = pytest.importorskip("torch", reason="needs the [embeddings] extra (torch)")
from .standins import TTS, CosyVoice2, TTS_Config  # noqa: E402


def clip_slices(clip: bytes) -> list[bytes]:
    """Distinctive slices of the clip: its file bytes, its samples as int16, float32 and
    float64 (what an extractor would hold in memory), from the middle of the speech."""
    samples, _ = soundfile.read(io.BytesIO(clip), dtype="float32")
    middle = len(samples) // 2
    window = samples[middle:middle + 24]
    return [clip[len(clip) // 2:len(clip) // 2 + 48],
            (window * 32768).astype("<i2").tobytes(), window.astype("<f4").tobytes(),
            window.astype("<f8").tobytes()]


def folder_holds(folder: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(folder)}: slice {i}"
                      for i, n in enumerate(needles) if n in data]
    return found


@pytest.mark.parametrize("version", ["v2", "v2Pro"])
def test_privacy_mode_leaves_no_clip_bytes_in_the_cache_folder(
        cache_dir: Path, stages: StageCache, encoder, piper_clips, tmp_path: Path, version):
    from voxcache.service.voices import VoiceStore

    clip = piper_clips[0]
    outside = tmp_path / "upload" / "ref.wav"  # where the client's clip sits, outside the cache
    outside.parent.mkdir()
    outside.write_bytes(clip)
    voice, _ = VoiceStore(cache_dir / "voices", 60).add("acme", clip, "The quick brown fox.",
                                                        "joe", private=True)
    SpeakerEmbeddings(stages, encoder).of(clip, tenant="acme")
    cosy = CosyVoice2()
    CosyVoicePrompts(stages, "cosy", tenant="acme").install(cosy.frontend)
    list(cosy.inference_zero_shot("Hello there.", "The quick brown fox.", str(outside)))
    tts = TTS(TTS_Config(version=version))
    GPTSoVITSPrompts(stages, "gsv", tenant="acme").install(tts)
    list(tts.run({"text": "Hello.", "text_lang": "en", "ref_audio_path": str(outside),
                  "prompt_text": "The quick brown fox.", "prompt_lang": "en"}))
    stages.cache.close()
    stored = [row.kind for row in Index(cache_dir / "index.sqlite3").rows()]  # files or inline
    assert sorted(stored) == ["embedding", "prompt", "prompt"]  # + CosyVoice, GPT-SoVITS
    assert voice.private
    assert folder_holds(cache_dir, clip_slices(clip)) == []
    # the search can fail: the same folder with the clip kept finds it at once
    VoiceStore(cache_dir / "voices", 60).add("acme", clip, None, "joe", private=False)
    assert folder_holds(cache_dir, clip_slices(clip))
    assert np.isfinite(np.frombuffer(clip_slices(clip)[2], "<f4")).all()
