"""POST /v1/audio/speech hits answered by the request memo: the route's answer, exactly.

The memo maps a request's identity (tenant, body bytes, the headers that change the
answer) to what the route decided for it. These tests sabotage the route after it has
answered once, so a 200 afterwards can only come from the memo's fast path — then check
that the fast answer is byte for byte the route's, and that nothing that should reach
the route (another tenant, another byte, a cache mode, a moved revision, a bad key, a
bad priority, an uploaded voice, a take gone from memory) is answered from the memo.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile
from fastapi.testclient import TestClient

KEYS = {"A": "key-of-tenant-a", "B": "key-of-tenant-b"}
BODY = json.dumps({"model": "tts-1", "input": "Your order is ready.", "voice": "alloy",
                   "response_format": "wav"}).encode()


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}", "Content-Type": "application/json"}


def post(client: TestClient, body: bytes = BODY, **headers: str):
    return client.post("/v1/audio/speech", content=body,
                       headers={"Content-Type": "application/json", **headers})


def sabotage(cached) -> None:
    """Make the route fail if it is reached at all."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("the route was reached")
    cached.resolve_and_key = refuse
    cached.aresolve_and_key = refuse


@pytest.fixture
def app_and_cached(make_app):
    return make_app()


def test_a_remembered_hit_is_the_routes_answer_byte_for_byte(app_and_cached) -> None:
    app, cached = app_and_cached
    client = TestClient(app)
    assert post(client).headers["x-cache"] == "MISS"
    by_route = post(client)
    assert by_route.headers["x-cache"] == "HIT"
    sabotage(cached)
    fast = post(client)
    assert fast.status_code == 200 and fast.content == by_route.content
    assert {k: v for k, v in fast.headers.items() if k != "date"} == {
        k: v for k, v in by_route.headers.items() if k != "date"}
    samples, rate = soundfile.read(io.BytesIO(fast.content), dtype="int16")
    assert fast.content[44:] == np.asarray(samples).tobytes()  # a plain 44-byte WAV


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_other_formats_are_remembered_too(app_and_cached, fmt) -> None:
    app, cached = app_and_cached
    client = TestClient(app)
    body = BODY.replace(b'"wav"', f'"{fmt}"'.encode())
    post(client, body)
    by_route = post(client, body)
    sabotage(cached)
    assert post(client, body).content == by_route.content


def test_what_must_reach_the_route_does(make_app) -> None:
    app, cached = make_app(api_keys={KEYS["A"]: "acme", KEYS["B"]: "globex"})
    client = TestClient(app)
    post(client, **auth("A"))
    post(client, **auth("A"))  # remembered for tenant A
    calls = []
    real = cached.aresolve_and_key

    async def counting(request):
        calls.append(request.tenant)
        return await real(request)

    cached.aresolve_and_key = counting
    assert post(client, **auth("A")).headers["x-cache"] == "HIT" and calls == []
    # another tenant with the very same body: its own key, through the route
    other = post(client, **auth("B"))
    assert other.headers["x-cache"] == "MISS" and calls == ["globex"]
    assert other.headers["x-cache-key"] != post(client, **auth("A")).headers["x-cache-key"]
    # one byte more, a cache mode, a bad priority, a bad key: all the route's
    calls.clear()
    assert post(client, BODY + b" ", **auth("A")).headers["x-cache"] == "HIT"
    assert post(client, **auth("A"), **{"X-Cache-Mode": "bypass"}).headers["x-cache"] == "BYPASS"
    assert post(client, **auth("A"), **{"X-Voxcache-Priority": "urgent"}).status_code == 400
    assert post(client, **{"Authorization": "Bearer nope-nope-nope"}).status_code == 401
    assert calls == ["acme", "acme"]  # the first two reached the route; the rest were refused


def test_a_revision_that_moved_or_a_take_gone_from_memory_goes_to_the_route(
        app_and_cached) -> None:
    app, cached = app_and_cached
    client = TestClient(app)
    first = post(client)
    post(client)
    cached.cache.in_process.clear()
    again = post(client)
    assert again.headers["x-cache-tier"] == "disk"  # the route read it from disk
    cached.engine.model_revision = "tone-2"  # e.g. a GPT-SoVITS weight switch through a gateway
    moved = post(client)
    assert moved.headers["x-cache"] == "MISS"
    assert moved.headers["x-cache-key"] != first.headers["x-cache-key"]


def test_an_uploaded_voice_is_never_remembered(app_and_cached) -> None:
    """Its clip can be deleted; the route must decide every time."""
    app, cached = app_and_cached
    client = TestClient(app)
    clip = io.BytesIO()
    soundfile.write(clip, 0.3 * np.sin(np.arange(16000) / 10), 16000, format="WAV")
    voice = client.post("/v1/voices", files={"file": ("v.wav", clip.getvalue())}).json()["id"]
    body = json.dumps({"input": "Cloned.", "voice": voice, "response_format": "wav"}).encode()
    post(client, body)
    post(client, body)
    assert len(app.state.speech_memo) == 0
    assert client.delete(f"/v1/voices/{voice}").status_code == 204
    assert post(client, body).status_code == 400  # the route: the voice is gone


def test_a_wav_hit_reuses_its_header_part(app_and_cached, monkeypatch) -> None:
    """A WAV hit sends the stored samples after the 44-byte header prepared on its first
    fast answer: neither ``held_parts`` nor the WAV header is rebuilt per request."""
    from voxcache.service import speech_memo

    app, cached = app_and_cached
    client = TestClient(app)
    post(client)
    by_route = post(client)
    sabotage(cached)
    first = post(client)

    def refuse(*_args, **_kwargs):
        raise AssertionError("held_parts called again for a take whose parts are known")
    monkeypatch.setattr(speech_memo, "held_parts", refuse)
    again = post(client)
    assert again.status_code == 200 and again.content == first.content == by_route.content
    assert again.headers["x-cache"] == "HIT"


def test_another_take_under_the_same_key_is_never_answered_with_the_old_ones_headers(
        app_and_cached) -> None:
    """A key can hold another take later (deleted, or its TTL ran out, and an unseeded
    engine rendered it again): the remembered answer's length and WAV header must follow
    the take in memory, never the one the memo first saw."""
    from voxcache.audio import Audio
    from voxcache.entry import audio_entry

    app, cached = app_and_cached
    client = TestClient(app)
    post(client)
    first = post(client)
    assert post(client).content == first.content  # remembered, answered fast
    key = first.headers["x-cache-key"]
    old = cached.cache.in_process.get(key)
    assert cached.cache.delete(key)
    longer = Audio(b"\x01\x00" * (old.header.length // 2 + 4410), old.header.sample_rate)
    assert cached.cache.put(audio_entry(key, longer, meta=dict(old.header.meta)))
    sabotage(cached)
    fresh = post(client)
    assert fresh.status_code == 200
    assert int(fresh.headers["content-length"]) == len(fresh.content)
    samples, _ = soundfile.read(io.BytesIO(fresh.content), dtype="int16")
    assert np.asarray(samples).tobytes() == longer.pcm
