"""Engine prompt caches: CosyVoice's frontend_zero_shot and GPT-SoVITS's prompt_cache, made
persistent, shared and keyed by content (stand-ins with the real signatures: standins.py)."""

from __future__ import annotations

import numpy as np
import pytest

from voxcache.cache import Cache
from voxcache.protocols.cosyvoice.prompts import CosyVoicePrompts
from voxcache.protocols.gpt_sovits.prompts import GPTSoVITSPrompts
from voxcache.stages import StageCache

torch = pytest.importorskip("torch", reason="needs the [embeddings] extra (torch)")
from .standins import TTS, CosyVoice2  # noqa: E402

SENTENCES = ("Your order is ready.", "Doors closing. Please stand clear.", "Next stop: Main St.")


def speech(model, text, prompt_text, wav):
    return [o["tts_speech"] for o in model.inference_zero_shot(text, prompt_text, wav)]


def test_cosyvoice_new_sentences_in_a_known_voice_extract_nothing(stages, ref_wav):
    cosy, plain = CosyVoice2(), CosyVoice2()
    prompts = CosyVoicePrompts(stages, "cosyvoice2-standin", tenant="acme")
    prompts.install(cosy.frontend)
    segments = 0
    for text in SENTENCES:
        cached = speech(cosy, text, "The quick brown fox.", str(ref_wav))
        expected = speech(plain, text, "The quick brown fox.", str(ref_wav))
        assert all(torch.equal(a, b) for a, b in zip(cached, expected, strict=True))
        segments += len(expected)
    assert prompts.extractions == 1
    assert cosy.frontend.calls == {"speech_feat": 1, "speech_token": 1, "spk_embedding": 1}
    # the engine alone extracts the prompt again for every segment of every request
    assert plain.frontend.calls == dict.fromkeys(cosy.frontend.calls, segments)
    # restart: a new engine and a new cache object over the same folder extract nothing
    stages.cache.close()
    fresh_cache = Cache(stages.cache.root)
    try:
        again = CosyVoice2()
        CosyVoicePrompts(StageCache(fresh_cache), "cosyvoice2-standin", "acme").install(
            again.frontend)
        speech(again, SENTENCES[0], "The quick brown fox.", ref_wav.read_bytes())
        assert again.frontend.calls == {}
    finally:
        fresh_cache.close()


def test_cosyvoice_prompts_are_keyed_by_content_not_by_name(stages, piper_clips, tmp_path):
    """CosyVoice#1400: a prompt reused by name serves the first clip's voice."""
    cosy = CosyVoice2()
    prompts = CosyVoicePrompts(stages, "cosyvoice2-standin")
    prompts.install(cosy.frontend)
    a, b = tmp_path / "a.wav", tmp_path / "b.wav"
    a.write_bytes(piper_clips[0])
    b.write_bytes(piper_clips[1])
    out_a = speech(cosy, SENTENCES[0], "Hello.", str(a))
    out_b = speech(cosy, SENTENCES[0], "Hello.", str(b))
    assert not torch.equal(out_a[0], out_b[0])
    assert prompts.extractions == 2
    instruct = cosy.frontend.frontend_instruct2("Hi.", "Speak slowly.", str(a), 24000, "")
    assert prompts.extractions == 3  # instruct text is the prompt text: its own entry
    assert "llm_prompt_speech_token" not in instruct
    named = CosyVoice2()
    named.add_zero_shot_spk("Hello.", str(a), "announcer")  # the engine's own cache
    stale = [o["tts_speech"] for o in named.inference_zero_shot(
        SENTENCES[0], "Hello.", str(b), zero_shot_spk_id="announcer")]
    assert torch.equal(stale[0], out_a[0])  # the name wins over the clip: the bug


def gsv_inputs(path, text="Hello world.", prompt="The quick brown fox."):
    return {"text": text, "text_lang": "en", "ref_audio_path": str(path),
            "prompt_text": prompt, "prompt_lang": "en"}


def test_gpt_sovits_overwritten_clip_at_the_same_path_is_a_new_prompt(
        stages, ref_wav, piper_clips):
    tts = TTS()
    prompts = GPTSoVITSPrompts(stages, "gsv-v2-standin")
    prompts.install(tts)
    plain = TTS()
    first = list(tts.run(gsv_inputs(ref_wav)))[0][1]
    assert np.array_equal(first, list(plain.run(gsv_inputs(ref_wav)))[0][1])
    list(tts.run(gsv_inputs(ref_wav, text="Another sentence.")))
    assert prompts.extractions == 1 and tts.calls == {"prompt_semantic": 1, "ref_spec": 1}
    assert tts.text_preprocessor.calls == 1
    ref_wav.write_bytes(piper_clips[1])  # same path, another clip
    second = list(tts.run(gsv_inputs(ref_wav)))[0][1]
    assert prompts.extractions == 2
    truth = list(TTS().run(gsv_inputs(ref_wav)))[0][1]
    assert np.array_equal(second, truth) and not np.array_equal(second, first)
    stale = list(plain.run(gsv_inputs(ref_wav)))[0][1]
    assert np.array_equal(stale, first)  # the engine alone keeps the old voice: the bug


def test_gpt_sovits_prompt_survives_a_restart(stages, ref_wav):
    tts = TTS()
    GPTSoVITSPrompts(stages, "gsv-v2-standin").install(tts)
    expected = list(tts.run(gsv_inputs(ref_wav)))[0][1]
    stages.cache.close()
    cache = Cache(stages.cache.root)
    try:
        restarted = TTS()
        prompts = GPTSoVITSPrompts(StageCache(cache), "gsv-v2-standin")
        prompts.install(restarted)
        got = list(restarted.run(gsv_inputs(ref_wav)))[0][1]
        assert np.array_equal(got, expected)
        assert prompts.extractions == 0 and restarted.calls == {}
        assert restarted.text_preprocessor.calls == 0
    finally:
        cache.close()
