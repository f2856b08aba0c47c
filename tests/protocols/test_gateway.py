"""Loading an upstream from ``KIND=URL`` and settings, and the retry rule."""

from __future__ import annotations

import httpx
import pytest

from voxcache import SynthesisRequest
from voxcache.config import load_settings
from voxcache.errors import InvalidParameter, UpstreamError
from voxcache.runtime import open_cached_engine
from voxcache.upstream import http as upstream_http
from voxcache.upstream import load_upstream, parse_upstream

from .servers import free_socket, serve_app
from .standins import openai_app


@pytest.mark.parametrize("spec, message", [
    ("http://127.0.0.1:9880", "must be KIND=URL"),
    ("gpt-sovits=", "must be KIND=URL"),
    ("kokoro=http://127.0.0.1:9880", "unknown upstream kind 'kokoro'"),
    ("openai=ftp://host/", "must be http:// or https://"),
    ("openai=http://", "must be http:// or https://"),
    ("openai=http://host:1/?x=1", "query"),
])
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(InvalidParameter, match=message):
        parse_upstream(spec)


def test_spec_is_normalised() -> None:
    assert parse_upstream(" GPT-SoVITS=http://127.0.0.1:9880/ ") == (
        "gpt-sovits", "http://127.0.0.1:9880")


def test_unknown_options_are_refused_with_the_accepted_ones() -> None:
    with pytest.raises(InvalidParameter,
                       match="takes no option.*sample_rate.*takes: .*ref_root_upstream"):
        load_upstream("gpt-sovits=http://127.0.0.1:9", sample_rate=24000)


def test_settings_and_environment_select_the_upstream(tmp_path, monkeypatch) -> None:
    app = openai_app()
    with serve_app(app) as url:
        monkeypatch.setenv("VOXCACHE_UPSTREAM", f"openai={url}")
        monkeypatch.setenv("VOXCACHE_UPSTREAM_REVISION", "kokoro-1.0")
        monkeypatch.setenv("VOXCACHE_UPSTREAM_OPTIONS", '{"api_key": "sk-test"}')
        settings = load_settings(cache_dir=tmp_path / "cache")
        cached = open_cached_engine(settings)
        # the stand-in speaks 0.3 s of tone whatever the text: a short text, or the quality
        # gate would find the take truncated (served, not stored)
        result = cached.synthesize(SynthesisRequest("From the env."))
    assert cached.engine.id == "openai"
    assert cached.engine.model_revision.endswith("rev=kokoro-1.0")
    assert result.cache == "miss" and len(app.state.calls) == 1


def test_bad_upstream_options_setting_is_an_invalid_parameter(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VOXCACHE_UPSTREAM_OPTIONS", "{not json")
    with pytest.raises(InvalidParameter, match="bad setting"):
        load_settings(cache_dir=tmp_path)


def test_connection_errors_are_retried_until_the_upstream_is_up(monkeypatch) -> None:
    """The first connect is refused; during the back-off the upstream starts; the retry works."""
    sock = free_socket()  # bound, not listening: connects are refused
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = openai_app()
    started = []

    def start_during_backoff(_seconds: float) -> None:
        if not started:
            started.append(serve_app(app, sock))
            started[0].__enter__()

    engine = load_upstream(f"openai={url}", voices=["alloy"], api_key="sk-test", retries=2)
    monkeypatch.setattr(upstream_http.time, "sleep", start_during_backoff)
    try:
        audio = list(engine.render(engine_request(engine)))
    finally:
        if started:
            started[0].__exit__(None, None, None)
    assert len(started) == 1 and len(app.state.calls) == 1 and audio[0].frames > 0


def test_connection_errors_give_up_after_the_retries(monkeypatch) -> None:
    sock = free_socket()
    attempts = []
    monkeypatch.setattr(upstream_http.time, "sleep", attempts.append)
    engine = load_upstream(f"openai=http://127.0.0.1:{sock.getsockname()[1]}",
                           voices=["alloy"], retries=3)
    with pytest.raises(UpstreamError, match="unreachable.*after 4 attempt"):
        list(engine.render(engine_request(engine)))
    assert attempts == [0.2, 0.4, 0.8]
    sock.close()


def engine_request(engine):
    from voxcache.request import resolve

    return resolve(SynthesisRequest("Retry me."), engine)


def test_openai_voice_names_reach_an_openai_upstream_unchanged(tmp_path) -> None:
    """Through the service: "nova" is the upstream's own voice, not an alias of the default."""
    from voxcache import Cache, CachedEngine
    from voxcache.config import Settings
    from voxcache.service import create_app
    from voxcache.service.options import ServiceOptions

    upstream = openai_app()
    with serve_app(upstream) as url:
        engine = load_upstream(f"openai={url}", voices=["alloy", "nova"], api_key="sk-test")
        settings = Settings(cache_dir=tmp_path / "cache")
        cached = CachedEngine(engine, Cache(settings.cache_dir))
        with serve_app(create_app(settings, options=ServiceOptions(), cached=cached)) as gateway:
            for voice in ("nova", "alloy"):
                answer = httpx.post(f"{gateway}/v1/audio/speech", timeout=30, json={
                    "model": "tts-1", "input": "Hello.", "voice": voice})
                assert answer.status_code == 200, answer.text
        cached.cache.close()
    assert [call["voice"] for call in upstream.state.calls] == ["nova", "alloy"]
