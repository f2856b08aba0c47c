"""``/tts`` fields and errors as api_v2 has them (its ``TTS_Request`` model and
``check_params``): unknown fields ignored, required ones refused in its order and words,
every error ``{"message"}`` (``"Exception"`` for a failed render), an upstream's refusal
kept a 4xx and scrubbed of its paths. Each refusal is compared with what the api_v2
stand-in answers for the same request."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions

from .api_v2_setup import body, gateway, standin, voice
from .servers import free_port, serve_app


@pytest.fixture
def routes(tmp_path):
    """(upstream, its URL, the gateway's URL)."""
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        yield upstream, url, address


def test_unknown_fields_are_ignored_get_and_post(routes) -> None:
    upstream, _url, address = routes
    plain = httpx.post(f"{address}/tts", json=body(), timeout=30)
    extra = {"volume": 2, "return_fragment": True, "emotion": "happy"}
    posted = httpx.post(f"{address}/tts", json=body(**extra), timeout=30)
    query = {k: str(v) for k, v in body(**extra).items()}
    got = httpx.get(f"{address}/tts", params=query, timeout=30)
    assert (plain.status_code, posted.status_code, got.status_code) == (200, 200, 200), \
        posted.text
    assert [r.headers["X-Cache"] for r in (plain, posted, got)] == ["MISS", "HIT", "HIT"]
    assert posted.content == got.content == plain.content
    assert "volume" not in upstream.calls[-1]


@pytest.mark.parametrize("missing", [
    ("text_lang",), ("prompt_lang",), ("ref_audio_path",), ("text",),
    ("text_lang", "prompt_lang"), ("ref_audio_path", "text", "text_lang", "prompt_lang")])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_missing_required_field_is_api_v2s_400(routes, missing, method) -> None:
    """api_v2 checks ref_audio_path, text, text_lang, prompt_lang in that order; the first
    missing one is the message. (Its GET crashes with a 500 on a missing text_lang or
    prompt_lang — ``None.lower()`` — where the gateway answers as its POST does.)"""
    upstream, url, address = routes
    fields = {k: v for k, v in body().items() if k not in missing}
    answers = {}
    for where in (url, address):
        if method == "POST":
            answers[where] = httpx.post(f"{where}/tts", json=fields, timeout=30)
        else:
            answers[where] = httpx.get(f"{where}/tts", params=fields, timeout=30)
    direct, through = answers[url], answers[address]
    assert through.status_code == 400 == direct.status_code
    assert through.json() == direct.json() == {"message": f"{missing[0]} is required"}
    assert len(upstream.calls) == 1  # the direct call: the gateway asked nobody


def test_prompt_lang_without_cloning(make_tone_gateway) -> None:
    """An engine that speaks without a reference has no prompt: prompt_lang is required
    only with a ref_audio_path (whose clip it describes), as everything api_v2 renders
    has one."""
    address, root = make_tone_gateway
    voice(root / "r.wav", 400)
    plain = httpx.get(f"{address}/tts", params={"text": "Hi.", "text_lang": "en"}, timeout=60)
    cloned = httpx.get(f"{address}/tts", params={"text": "Hi.", "text_lang": "en",
                                                 "ref_audio_path": "r.wav"}, timeout=60)
    with_lang = httpx.get(f"{address}/tts", params={"text": "Hi.", "text_lang": "en",
                                                    "ref_audio_path": "r.wav",
                                                    "prompt_lang": "en"}, timeout=60)
    no_lang = httpx.get(f"{address}/tts", params={"text": "Hi."}, timeout=60)
    assert plain.status_code == 200 and with_lang.status_code == 200, with_lang.text
    assert (cloned.status_code, cloned.json()) == (400, {"message": "prompt_lang is required"})
    assert (no_lang.status_code, no_lang.json()) == (400, {"message": "text_lang is required"})


@pytest.fixture
def make_tone_gateway(tmp_path):
    root = tmp_path / "refs"
    root.mkdir()
    settings = Settings(cache_dir=tmp_path / "cache", engine="tone", reference_roots=[root])
    app = create_app(settings, options=ServiceOptions())
    with serve_app(app) as address:
        yield address, root
    app.state.server.cache.close()


def test_an_upstream_refusal_stays_a_4xx_without_its_paths(tmp_path) -> None:
    """The upstream mounts the reference root where the clip is not: it refuses with its
    absolute path in ``Exception``. The client gets api_v2's 400 (not a retryable 502),
    its fields, and only the file's name."""
    with standin(tmp_path) as (upstream, url):
        elsewhere = tmp_path / "gateway-side"
        elsewhere.mkdir()
        voice(elsewhere / "a.wav", 300)
        with gateway(url, elsewhere, tmp_path / "cache",
                     upstream_options={"ref_root_upstream": str(tmp_path / "not-there")}) \
                as address:
            refused = httpx.post(f"{address}/tts", json=body(), timeout=30)
            short = httpx.post(f"{address}/tts", json=body(ref_audio_path="short.wav"),
                               timeout=30)
    assert refused.status_code == 400, refused.text
    answer = refused.json()
    assert answer["message"] == "tts failed" and set(answer) == {"message", "Exception"}
    assert "…/a.wav" in answer["Exception"]
    assert str(tmp_path) not in refused.text and "/not-there" not in refused.text
    assert short.status_code == 400 and str(tmp_path) not in short.text


def test_a_clip_the_upstream_refuses_is_its_400(routes) -> None:
    """GPT-SoVITS takes 3–10 s reference clips; its refusal comes back as it sends it."""
    upstream, url, address = routes
    voice(upstream.root / "short.wav", 300, seconds=1.0)
    direct = httpx.post(f"{url}/tts", json=body(ref_audio_path="short.wav"), timeout=30)
    through = httpx.post(f"{address}/tts", json=body(ref_audio_path="short.wav"), timeout=30)
    assert through.status_code == 400 == direct.status_code
    assert through.json() == direct.json()
    assert through.json()["message"] == "tts failed" and "3~10" in through.json()["Exception"]


def test_an_unreachable_upstream_is_a_5xx_in_api_v2s_shape(tmp_path) -> None:
    with standin(tmp_path) as (upstream, _url):
        root = upstream.root
    with gateway(f"http://127.0.0.1:{free_port()}", root, tmp_path / "cache",
                 upstream_options={"retries": 0}) as address:
        down = httpx.post(f"{address}/tts", json=body(), timeout=30)
    assert down.status_code == 502
    assert down.json()["message"] == "tts failed" and "unreachable" in down.json()["Exception"]


@pytest.mark.parametrize("fields", [
    {"text": "Hi."}, {**body(), "media_type": "mp4"}, {**body(), "streaming_mode": 7},
    {**body(), "text_split_method": "cut9"}, {**body(), "text_lang": "xx"},
    {**body(), "top_k": "many"}, {**body(), "ref_audio_path": "../../etc/passwd"}])
def test_every_refusal_is_a_message_and_nothing_else(routes, fields) -> None:
    _upstream, _url, address = routes
    answer = httpx.post(f"{address}/tts", content=json.dumps(fields), timeout=30,
                        headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert set(answer.json()) == {"message"} and answer.json()["message"]


@pytest.mark.parametrize("streaming", [0, 2])
def test_aac_is_encoded_or_refused_before_anything_renders(routes, streaming) -> None:
    """api_v2 pipes each take (or chunk) through ffmpeg for aac; without ffmpeg the gateway
    says so up front instead of rendering a take it cannot deliver."""
    upstream, _url, address = routes
    answer = httpx.post(f"{address}/tts", json=body(media_type="aac",
                                                      streaming_mode=streaming), timeout=30)
    if shutil.which("ffmpeg") is None:
        assert answer.status_code == 400 and "ffmpeg" in answer.json()["message"]
        assert upstream.calls == []
    else:
        assert answer.status_code == 200 and answer.content[:2] in (b"\xff\xf1", b"\xff\xf9")
