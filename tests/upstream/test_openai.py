"""Any OpenAI-compatible speech server as an upstream."""

from __future__ import annotations

import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.errors import UnknownVoice, UnsupportedFeature, UpstreamError
from voxcache.upstream import load_upstream
from voxcache.upstream.openai import OPENAI_VOICES

from .servers import serve_app
from .standins import OPENAI_RATE, openai_app


@pytest.fixture
def upstream():
    app = openai_app()
    with serve_app(app) as url:
        yield url, app.state.calls


def test_sends_the_openai_body_and_caches_the_wav(upstream, cache: Cache) -> None:
    url, calls = upstream
    cached = CachedEngine(load_upstream(f"openai={url}/v1", api_key="sk-test", model="tts-1-hd",
                                        instructions=True), cache)
    request = SynthesisRequest("Good morning.", voice="nova", speed=1.5, instruct="Warmly.")
    first = cached.synthesize(request)
    second = cached.synthesize(request)
    assert calls == [{"model": "tts-1-hd", "input": "Good morning.", "voice": "nova",
                      "response_format": "wav", "speed": 1.5, "instructions": "Warmly."}]
    assert (first.cache, second.cache) == ("miss", "hit")
    assert first.audio.sample_rate == OPENAI_RATE
    assert "model=tts-1-hd" in cached.engine.model_revision


def test_model_is_part_of_the_key(upstream, cache: Cache) -> None:
    url, _ = upstream
    keys = {CachedEngine(load_upstream(f"openai={url}", api_key="sk-test", model=m), cache)
            .synthesize(SynthesisRequest("Hi.")).key for m in ("tts-1", "kokoro")}
    assert len(keys) == 2


def test_voices_come_from_the_server_when_it_lists_them(cache: Cache) -> None:
    with serve_app(openai_app(voices=("af_bella", "am_adam"))) as url:
        listed = load_upstream(f"openai={url}", api_key="sk-test")
    assert set(listed.voices) == {"af_bella", "am_adam"}
    with serve_app(openai_app()) as url:
        builtin = load_upstream(f"openai={url}")
    assert tuple(builtin.voices) == OPENAI_VOICES
    with pytest.raises(UnknownVoice):
        CachedEngine(builtin, cache).resolve(SynthesisRequest("Hi.", voice="af_bella"))


def test_refusals_and_upstream_errors(upstream, cache: Cache) -> None:
    url, calls = upstream
    cached = CachedEngine(load_upstream(f"openai={url}", api_key="sk-test"), cache)
    with pytest.raises(UnsupportedFeature, match="instruct"):
        cached.synthesize(SynthesisRequest("Hi.", instruct="Whisper."))
    with pytest.raises(UpstreamError) as crashed:
        cached.synthesize(SynthesisRequest("fail"))
    assert crashed.value.upstream_status == 500 and "the model crashed" in str(crashed.value)
    wrong_key = CachedEngine(load_upstream(f"openai={url}", api_key="sk-nope"), cache)
    with pytest.raises(UpstreamError) as refused:
        wrong_key.synthesize(SynthesisRequest("Hi."))
    assert refused.value.upstream_status == 401 and "Incorrect API key" in str(refused.value)
    assert len(calls) == 1  # the 500 was not retried; the 401 never reached the recorder
