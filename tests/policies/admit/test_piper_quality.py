"""The quality gate on real speech: Piper over every hot phrase it speaks, and the real
Whisper base round trip on Piper's takes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.helpers.fixtures import HOT_PHRASES
from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.audio import Audio
from voxcache.policies.admit import GateSettings, QualitySettings
from voxcache.policies.admit.gate import Gate
from voxcache.testing.faulty import broken

HOT = HOT_PHRASES
FAULTS = {"runaway": "runaway", "truncated": "truncated", "silent": "silence",
          "clipped": "clipping", "nonfinite": "nonfinite", "dc": "dc",
          "gap": "inner_silence"}


def english() -> list[str]:
    phrases = json.loads(HOT.read_text(encoding="utf-8"))["phrases"]
    return [p["text"] for p in phrases if p.get("language", "en") == "en"]


@pytest.mark.piper
def test_piper_passes_the_gate_on_every_phrase_it_speaks(tmp_path: Path, piper) -> None:
    cached = CachedEngine(piper, Cache(tmp_path / "c"), segments=True)  # the defaults
    texts = english()
    assert len(texts) == 20
    results = [cached.synthesize(SynthesisRequest(text)) for text in texts]
    refused = [(t, r.reason) for t, r in zip(texts, results, strict=True) if not r.stored]
    assert refused == []  # no false refusal
    # and each take, broken on purpose, is caught (a catch rate of 1 on these phrases)
    gate = cached.gate
    for text, result in zip(texts[:6], results[:6], strict=True):
        good = result.audio.samples().astype(np.float32) / 32768.0
        resolved = cached.resolve(SynthesisRequest(text))
        for fault, reason in FAULTS.items():
            take = broken(good, fault, result.audio.sample_rate)
            assert gate.quality_refusal(take, resolved) == f"quality:{reason}", (text, fault)
    cached.cache.close()


@pytest.mark.piper
@pytest.mark.slow
def test_whisper_base_hears_piper_and_refuses_the_wrong_words(tmp_path: Path, piper) -> None:
    pytest.importorskip("faster_whisper", reason="the quality extra")
    gate = Gate(GateSettings(quality=QualitySettings(asr=True)), Cache(tmp_path / "c"))
    cached = CachedEngine(piper, Cache(tmp_path / "p"))
    texts = english()[:5]
    takes = [cached.synthesize(SynthesisRequest(text)).audio for text in texts]
    for text, audio in zip(texts, takes, strict=True):
        assert gate.quality_refusal(audio, cached.resolve(SynthesisRequest(text))) is None, text
    # a take of other words (what a confused engine or a wrong reference gives) is refused;
    # (not "forty-three" for "forty-two": numbers are left out of the comparison)
    for index, text in enumerate(texts):
        other = takes[(index + 2) % len(takes)]
        assert gate.quality_refusal(other, cached.resolve(SynthesisRequest(text))) == \
            "quality:asr", text
    assert (tmp_path / "c" / "models" / "whisper-base" / "model.bin").stat().st_size > 1e8
    counters = gate.cache.stats()["counters"]
    assert counters["gate_asr_checks"] == 10 and counters["gate_asr_ms"] > 0
    gate.cache.close()
    cached.cache.close()


def test_a_missing_extra_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    import builtins

    from voxcache.errors import MissingDependency

    real_import = builtins.__import__

    def no_whisper(name: str, *args, **kwargs):
        if name.startswith("faster_whisper"):
            raise ModuleNotFoundError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_whisper)
    (tmp_path / "c" / "models" / "whisper-base").mkdir(parents=True)
    with pytest.raises(MissingDependency, match=r"pip install 'voxcache\[quality\]'"):
        Gate(GateSettings(quality=QualitySettings(asr=True, asr_model=str(tmp_path))),
             Cache(tmp_path / "c"))


def test_speed_is_part_of_the_expected_length(tmp_path: Path) -> None:
    """A take asked at speed 0.5 may be twice as long: not a runaway."""
    gate = Gate(GateSettings(), Cache(tmp_path / "c"))
    rate = 16000
    seconds = 6.0  # 12 syllables at 2 a second: slow but speech
    t = np.arange(int(seconds * rate)) / rate
    take = Audio.from_float(0.4 * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
                            * np.sin(2 * np.pi * 200 * t), rate)
    from voxcache.engines.tone import ToneEngine
    from voxcache.request import resolve

    base = resolve(SynthesisRequest("Please mind the gap between the cars."), ToneEngine())
    assert gate.quality_refusal(take, replace(base, speed=0.25)) is None
    assert gate.quality_refusal(take, replace(base, speed=4.0)) == "quality:runaway"
    gate.cache.close()
