"""GPT-SoVITS api_v2 as an upstream: parameters, content-keyed references, errors, streaming."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.audio import Audio
from voxcache.errors import InvalidParameter, UpstreamError
from voxcache.upstream import load_upstream
from voxcache.upstream.gpt_sovits import reference_params

from .conftest import gateway_app
from .servers import serve_app
from .standins import GSV_RATE, gpt_sovits_app, wav_bytes


def clip(path: Path, pitch: float) -> Path:
    t = np.arange(16000) / 16000
    path.write_bytes(wav_bytes((0.3 * np.sin(2 * np.pi * pitch * t) * 32767).astype("<i2"),
                               16000))
    return path


@pytest.fixture
def upstream(ref_dir: Path):
    """A stand-in api_v2 server whose working folder is ``ref_dir``."""
    app = gpt_sovits_app(ref_dir)
    with serve_app(app) as url:
        yield url, app.state.calls


def gsv(url: str, base: Path, cache: Cache, **options) -> CachedEngine:
    return CachedEngine(load_upstream(f"gpt-sovits={url}", ref_base=str(base), **options),
                        cache)


def request(path: str, text: str = "Hello world.", **params) -> SynthesisRequest:
    return SynthesisRequest(text, language="en", params={**reference_params(path), **params})


def test_sends_api_v2_fields_with_api_v2_defaults(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    clip(ref_dir / "a.wav", 300)
    cached = gsv(url, ref_dir, cache)
    result = cached.synthesize(SynthesisRequest(
        "Hello world.", language="all_zh", seed=42, speed=1.25,
        params={**reference_params("a.wav", base=ref_dir), "prompt_text": "Hi."}))
    sent = calls[-1]
    assert sent["text"] == "Hello world." and sent["text_lang"] == "all_zh"
    assert sent["ref_audio_path"] == "a.wav" and sent["prompt_lang"] == "all_zh"
    assert (sent["seed"], sent["speed_factor"], sent["media_type"]) == (42, 1.25, "wav")
    assert (sent["top_k"], sent["top_p"], sent["temperature"]) == (15, 1.0, 1.0)
    assert (sent["text_split_method"], sent["repetition_penalty"]) == ("cut5", 1.35)
    assert (sent["batch_size"], sent["fragment_interval"], sent["sample_steps"]) == (1, 0.3, 32)
    assert sent["split_bucket"] is True and sent["super_sampling"] is False
    assert result.audio.sample_rate == GSV_RATE


def test_same_content_at_two_paths_is_one_key(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    clip(ref_dir / "a.wav", 300)
    shutil.copy(ref_dir / "a.wav", ref_dir / "copy.wav")
    cached = gsv(url, ref_dir, cache)
    first = cached.synthesize(request(str(ref_dir / "a.wav")))
    second = cached.synthesize(request(str(ref_dir / "copy.wav")))
    assert second.cache == "hit" and second.key == first.key
    assert len(calls) == 1


def test_changed_content_at_one_path_is_a_new_key(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    path = clip(ref_dir / "voice.wav", 300)
    cached = gsv(url, ref_dir, cache)
    first = cached.synthesize(request(str(path)))
    clip(path, 450)  # the operator replaces the clip in place
    second = cached.synthesize(request(str(path)))
    assert second.cache == "miss" and second.key != first.key
    assert second.audio != first.audio
    assert len(calls) == 2


def test_unreadable_path_keys_on_the_string_and_warns(upstream, ref_dir, cache, caplog) -> None:
    url, calls = upstream
    clip(ref_dir / "remote.wav", 300)
    cached = CachedEngine(load_upstream(f"gpt-sovits={url}"), cache)  # no ref_base
    with caplog.at_level("WARNING", logger="voxcache.upstream"):
        params = reference_params("remote.wav")
    assert params["ref_audio_id"] == "path:remote.wav"
    assert "keying on the path" in caplog.text
    first = cached.synthesize(SynthesisRequest("Hi.", params=params))
    again = cached.synthesize(SynthesisRequest("Hi.", params=reference_params("remote.wav")))
    assert (first.cache, again.cache) == ("miss", "hit") and len(calls) == 1


def test_a_clip_only_the_upstream_decodes_is_keyed_by_its_bytes(ref_dir) -> None:
    (ref_dir / "a.m4a").write_bytes(b"not something libsndfile reads")
    first = reference_params("a.m4a", base=ref_dir)["ref_audio_id"]
    (ref_dir / "a.m4a").write_bytes(b"another clip in that format")
    assert first.startswith("bytes:")
    assert reference_params("a.m4a", base=ref_dir)["ref_audio_id"] != first


def test_aux_references_are_a_set_of_contents(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    main, b, c = (clip(ref_dir / f"{n}.wav", p) for n, p in (("m", 300), ("b", 500), ("c", 700)))
    cached = gsv(url, ref_dir, cache)
    one = reference_params(str(main), [str(b), str(c)])
    other_order = reference_params(str(main), [str(c), str(b)])
    first = cached.synthesize(SynthesisRequest("Hi.", params=one))
    second = cached.synthesize(SynthesisRequest("Hi.", params=other_order))
    assert second.cache == "hit" and len(calls) == 1
    assert calls[0]["aux_ref_audio_paths"] == [str(b), str(c)]
    assert first.key == second.key


def test_a_stale_reference_id_is_refused_before_rendering(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    path = clip(ref_dir / "v.wav", 300)
    params = reference_params(str(path))
    clip(path, 600)  # changed after the id was computed
    cached = gsv(url, ref_dir, cache)
    with pytest.raises(InvalidParameter, match="does not match"):
        cached.synthesize(SynthesisRequest("Hi.", params=params))
    with pytest.raises(InvalidParameter, match="JSON list"):
        cached.synthesize(SynthesisRequest("Hi.", params={**params,
                                                          "aux_ref_audio_paths": "a.wav"}))
    assert calls == []


def test_upstream_identity_is_in_the_key(ref_dir, cache) -> None:
    clip(ref_dir / "a.wav", 300)
    with serve_app(gpt_sovits_app(ref_dir)) as one, serve_app(gpt_sovits_app(ref_dir)) as two:
        keys = {gsv(url, ref_dir, cache, **opts).synthesize(request(str(ref_dir / "a.wav"))).key
                for url, opts in ((one, {}), (two, {}), (one, {"revision": "v4"}))}
    assert len(keys) == 3


def test_upstream_errors_carry_status_and_message(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    cached = gsv(url, ref_dir, cache)
    params = reference_params("missing.wav")  # the upstream cannot open it either
    with pytest.raises(UpstreamError) as caught:
        cached.synthesize(SynthesisRequest("Hi.", params=params))
    assert caught.value.upstream_status == 400
    assert "tts failed" in str(caught.value) and "missing.wav" in str(caught.value)
    assert len(calls) == 1  # a 4xx answer is never retried


def test_streaming_mode_answers_are_decoded(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    path = clip(ref_dir / "a.wav", 300)
    cached = gsv(url, ref_dir, cache)
    whole = cached.synthesize(request(str(path)))
    streamed = cached.synthesize(request(str(path), streaming_mode=2))
    assert streamed.key != whole.key and calls[-1]["streaming_mode"] == 2
    assert streamed.audio == whole.audio  # the stand-in renders the same tone both ways


def test_uploaded_clip_is_staged_in_ref_dir(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    data = clip(ref_dir / "src.wav", 300).read_bytes()
    cached = gsv(url, ref_dir, cache, ref_dir=str(ref_dir / "staged"))
    assert cached.engine.supports_reference
    result = cached.synthesize(SynthesisRequest("Hi.", reference_audio=data, prompt_text="Yo."))
    sent = calls[-1]
    assert sent["ref_audio_path"].startswith(str(ref_dir / "staged"))
    assert Path(sent["ref_audio_path"]).read_bytes() == data
    assert sent["prompt_text"] == "Yo." and isinstance(result.audio, Audio)


def test_tts_route_round_trip(upstream, ref_dir, cache) -> None:
    url, calls = upstream
    clip(ref_dir / "a.wav", 300)
    app = gateway_app(gsv(url, ref_dir, cache))
    with serve_app(app) as gateway:
        body = {"text": "Hello.", "text_lang": "EN", "ref_audio_path": "a.wav",
                "prompt_lang": "en", "top_k": 5, "media_type": "raw"}
        first = httpx.post(f"{gateway}/tts", json=body, timeout=30)
        query = {**body, "text_lang": "en", "top_k": "5"}
        second = httpx.get(f"{gateway}/tts", params=query, timeout=30)
        bad = httpx.get(f"{gateway}/tts", params={**query, "text_split_method": "cut9"})
        failed = httpx.get(f"{gateway}/tts", params={**query, "ref_audio_path": "nope.wav"})
    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "audio/raw"
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("MISS", "HIT")
    assert second.content == first.content and len(first.content) % 2 == 0
    assert calls[0]["top_k"] == 5 and calls[0]["prompt_lang"] == "en"
    assert bad.status_code == 400 and "text_split_method" in bad.json()["message"]
    assert failed.status_code == 502 and "tts failed" in failed.json()["message"]
