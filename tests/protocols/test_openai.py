"""Any OpenAI-compatible speech server as an upstream."""

from __future__ import annotations

import pytest
from fastapi import Request

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.errors import UnknownVoice, UnsupportedFeature, UpstreamError
from voxcache.protocols.openai.fields import OPENAI_VOICES
from voxcache.upstream import load_upstream

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


def test_an_upstream_refusal_reaches_the_openai_client_as_its_400(tmp_path) -> None:
    """The upstream refuses the text (its 4096-character limit): the caller must change the
    request, so the official client gets a 400 (BadRequestError), not a retryable 502, and
    the message carries the upstream's reason but neither its URL nor its paths. A refusal
    of voxcache's own API key is the operator's problem: it stays a 502."""
    import openai
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from voxcache.config import Settings
    from voxcache.service import create_app
    from voxcache.service.options import ServiceOptions

    strict = FastAPI()

    @strict.post("/v1/audio/speech")
    async def speech(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != "Bearer sk-test":
            return JSONResponse({"error": {"message": "Incorrect API key provided"}}, 401)
        return JSONResponse({"error": {
            "message": "input is over 4096 characters (see /srv/openai/limits.py)",
            "type": "invalid_request_error", "param": "input",
            "code": "string_above_max_length"}}, 400)

    settings = Settings(cache_dir=tmp_path / "cache")
    with serve_app(strict) as url:
        for key, status in (("sk-test", 400), ("sk-nope", 502)):
            cache = Cache(tmp_path / key)
            cached = CachedEngine(load_upstream(f"openai={url}/v1", api_key=key), cache)
            app = create_app(settings, options=ServiceOptions(), cached=cached)
            with serve_app(app) as gateway:
                client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="x", max_retries=0)
                with pytest.raises(openai.APIStatusError) as err:
                    client.audio.speech.create(model="tts-1", voice="alloy", input="Too long.")
            cache.close()
            assert err.value.status_code == status
            if status == 400:
                assert isinstance(err.value, openai.BadRequestError)
                assert "over 4096 characters" in err.value.message
                assert url not in err.value.message and "/srv/openai" not in err.value.message
