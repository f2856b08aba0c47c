"""CosyVoice's FastAPI server as an upstream, and the CosyVoice-compatible routes."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.errors import UnsupportedFeature, UpstreamError
from voxcache.upstream import load_upstream

from .conftest import gateway_app
from .servers import serve_app
from .standins import COSY_RATE, cosyvoice_app, wav_bytes


@pytest.fixture
def clip() -> bytes:
    t = np.arange(16000) / 16000
    return wav_bytes((0.3 * np.sin(2 * np.pi * 330 * t) * 32767).astype("<i2"), 16000)


@pytest.fixture
def upstream():
    app = cosyvoice_app()
    with serve_app(app) as url:
        yield url, app.state.calls


@pytest.fixture
def cosy(upstream, cache: Cache) -> CachedEngine:
    return CachedEngine(load_upstream(f"cosyvoice={upstream[0]}", voices=["中文女", "英文男"]),
                        cache)


def test_each_request_shape_reaches_its_route(upstream, cosy, clip) -> None:
    _, calls = upstream
    cases = [
        (SynthesisRequest("你好。", voice="英文男"), "sft"),
        (SynthesisRequest("你好。", voice="英文男", instruct="Cheerful."), "instruct"),
        (SynthesisRequest("你好。", reference_audio=clip, prompt_text="Hi."), "zero_shot"),
        (SynthesisRequest("你好。", reference_audio=clip), "cross_lingual"),
        (SynthesisRequest("你好。", reference_audio=clip, instruct="Slowly."), "instruct2"),
    ]
    for request, route in cases:
        result = cosy.synthesize(request)
        assert calls[-1]["route"] == route and result.cache == "miss"
        assert result.audio.sample_rate == COSY_RATE
    assert calls[2]["prompt_text"] == "Hi." and calls[4]["instruct_text"] == "Slowly."
    assert cosy.synthesize(cases[2][0]).cache == "hit" and len(calls) == 5


def test_what_the_server_cannot_take_is_refused(upstream, cosy) -> None:
    _, calls = upstream
    with pytest.raises(UnsupportedFeature, match="speed"):
        cosy.synthesize(SynthesisRequest("Hi.", speed=1.5))
    with pytest.raises(UnsupportedFeature, match="seed"):
        cosy.synthesize(SynthesisRequest("Hi.", seed=3))
    assert calls == []


def test_upstream_error_is_an_upstream_error(upstream, cache) -> None:
    url, _ = upstream
    cached = CachedEngine(load_upstream(f"cosyvoice={url}", voices=["无此人"]), cache)
    with pytest.raises(UpstreamError) as caught:
        cached.synthesize(SynthesisRequest("Hi."))
    assert caught.value.upstream_status == 500 and "unknown speaker" in str(caught.value)


def test_sample_rate_is_the_operators_and_in_the_revision(upstream, cache) -> None:
    url, _ = upstream
    v1 = load_upstream(f"cosyvoice={url}", sample_rate=22050)
    v2 = load_upstream(f"cosyvoice={url}")
    assert (v1.sample_rate, v2.sample_rate) == (22050, 24000)
    assert v1.model_revision != v2.model_revision


def test_routes_answer_raw_pcm_through_the_cache(upstream, cosy, clip) -> None:
    _, calls = upstream
    with serve_app(gateway_app(cosy)) as gateway:
        form = {"tts_text": "你好。", "prompt_text": "Hi."}
        files = {"prompt_wav": ("p.wav", clip, "audio/wav")}
        first = httpx.post(f"{gateway}/inference_zero_shot", data=form, files=files, timeout=60)
        second = httpx.post(f"{gateway}/inference_zero_shot", data=form, files=files, timeout=60)
        sft = httpx.request("GET", f"{gateway}/inference_sft",
                            data={"tts_text": "你好。", "spk_id": "中文女"}, timeout=60)
        unknown = httpx.post(f"{gateway}/inference_sft",
                             data={"tts_text": "你好。", "spk_id": "nobody"}, timeout=60)
        no_text = httpx.post(f"{gateway}/inference_zero_shot",
                             data={"tts_text": "你好。", "prompt_text": " "}, files=files,
                             timeout=60)
    assert first.status_code == 200, first.text
    assert "content-type" not in first.headers
    assert first.headers["X-Sample-Rate"] == str(COSY_RATE)
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("MISS", "HIT")
    assert first.content == second.content and not first.content.startswith(b"RIFF")
    assert sft.status_code == 200 and calls[-1]["route"] == "sft"
    # the upstream knows its speakers: "nobody" is asked for, and its 500 is the gateway's 502
    assert calls[-1] == {"route": "sft", "tts_text": "你好。", "spk_id": "nobody"}
    assert unknown.status_code == 502 and "unknown speaker nobody" in unknown.json()["detail"]
    assert no_text.status_code == 400
    assert len(calls) == 3


def test_routes_refuse_what_an_embedded_engine_cannot_do(cached_piper, clip) -> None:
    with serve_app(gateway_app(cached_piper)) as gateway:
        files = {"prompt_wav": ("p.wav", clip, "audio/wav")}
        cloned = httpx.post(f"{gateway}/inference_cross_lingual", data={"tts_text": "Hi."},
                            files=files, timeout=60)
        styled = httpx.post(f"{gateway}/inference_instruct",
                            data={"tts_text": "Hi.", "spk_id": "joe", "instruct_text": "Loud."},
                            timeout=60)
        plain = httpx.post(f"{gateway}/inference_sft", data={"tts_text": "Hi.", "spk_id": "joe"},
                           timeout=60)
    assert cloned.status_code == 400 and "reference audio" in cloned.json()["detail"]
    assert styled.status_code == 400 and "instruct" in styled.json()["detail"]
    assert plain.status_code == 200 and plain.headers["X-Sample-Rate"] == "22050"
