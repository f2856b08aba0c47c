"""The official ``openai`` client against a real uvicorn server: it must work unchanged."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import openai
import pytest
import soundfile


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_speech_twice_second_is_a_hit(tone_server) -> None:
    live, cached = tone_server
    c = client(live.url)
    first = c.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input="Your order is ready.", response_format="wav")
    second = c.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input="Your order is ready.", response_format="wav")
    assert first.headers["x-cache"] == "MISS"
    assert second.headers["x-cache"] == "HIT"
    assert second.headers["x-cache-tier"] == "memory"
    assert first.headers["x-cache-key"] == second.headers["x-cache-key"]
    # the delivered WAV is not the stored file (GET /v1/audio/{key}, ETag = the key)
    assert second.headers["etag"] == f'"{second.headers["x-cache-key"]}.wav"'
    audio = second.parse().content
    assert int(second.headers["content-length"]) == len(audio)
    samples, rate = soundfile.read(io.BytesIO(audio), dtype="int16")
    assert rate == 16000 and len(samples) > 1000 and np.abs(samples).max() > 1000
    assert cached.engine.calls == ["Your order is ready."]


@pytest.mark.parametrize("fmt", ["mp3", "flac", "opus"])
def test_default_and_encoded_formats_decode(tone_server, fmt: str) -> None:
    live, _ = tone_server
    audio = client(live.url).audio.speech.create(
        model="gpt-4o-mini-tts", voice="nova", input="Doors closing.", response_format=fmt)
    samples, rate = soundfile.read(io.BytesIO(audio.content))
    assert len(samples) > 0 and rate in (16000, 24000)


def test_streaming_response(tone_server) -> None:
    live, cached = tone_server
    text = "First sentence here. Second one follows. And a third."
    with client(live.url).audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format="pcm") as response:
        assert response.headers["x-cache"] == "MISS"
        pcm = b"".join(response.iter_bytes())
    assert len(pcm) > 0 and len(pcm) % 2 == 0
    # The streamed miss was stored: the same request is now a hit with identical samples.
    again = client(live.url).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=text, response_format="pcm")
    assert again.headers["x-cache"] == "HIT"
    assert again.parse().content == pcm
    assert int(again.headers["content-length"]) == len(pcm)  # a stored take goes whole
    assert len(cached.engine.calls) == 1


def test_sse_stream_format(tone_server) -> None:
    live, _ = tone_server
    events = []
    with httpx.stream("POST", f"{live.url}/v1/audio/speech", json={
            "model": "tts-1", "voice": "alloy", "input": "One. Two. Three.",
            "response_format": "pcm", "stream_format": "sse"}, timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    # one per sentence, as the engine rendered them, then the 24 kHz resampler's tail
    assert len(deltas) == 4
    assert events[-1]["type"] == "speech.audio.done"
    assert all(base64.b64decode(d["audio"]) for d in deltas)


def test_openai_errors_are_openai_shaped(tone_server) -> None:
    live, _ = tone_server
    with pytest.raises(openai.BadRequestError) as err:
        client(live.url).audio.speech.create(model="tts-1", voice="alloy", input="hi",
                                             response_format="ogg")  # type: ignore[arg-type]
    assert "supported: " in err.value.message or "supported" in str(err.value.body)
    with pytest.raises(openai.BadRequestError):  # OpenAI answers an unknown voice with 400
        client(live.url).audio.speech.create(model="tts-1", voice="no-such-voice", input="hi")


def test_works_against_a_second_server_on_the_same_cache(make_app, live) -> None:
    """A fresh process (server) over the same folder answers from disk."""
    app1, _ = make_app()
    with live(app1) as server:
        client(server.url).audio.speech.create(model="tts-1", voice="echo", input="Persisted.",
                                             response_format="wav")
    app2, cached2 = make_app()
    with live(app2) as server:
        r = client(server.url).audio.speech.with_raw_response.create(
            model="tts-1", voice="echo", input="Persisted.", response_format="wav")
    assert r.headers["x-cache"] == "HIT" and r.headers["x-cache-tier"] == "disk"
    assert cached2.engine.calls == []


def test_encoded_delivery_is_stored_once_on_disk_beside_its_pcm(tone_server) -> None:
    live, cached = tone_server
    c = client(live.url)
    first = c.audio.speech.create(model="tts-1", voice="alloy", input="Mind the gap.",
                                  response_format="mp3").content
    cached.cache.in_process.clear()  # the second mp3 must come from the disk tier
    second = c.audio.speech.create(model="tts-1", voice="alloy", input="Mind the gap.",
                                   response_format="mp3").content
    assert first == second
    counts = cached.cache.session_counts()
    assert counts.get("encoded_misses") == 1 and counts.get("encoded_hits") == 1
    disk = cached.cache.folder
    stored = sorted(kind for (kind,) in disk.index.query("SELECT kind FROM entries"))
    assert stored == ["audio", "encoded"]  # the PCM take and its mp3 encoding, once each
    key = next(k for (k,) in disk.index.query("SELECT key FROM entries WHERE kind='encoded'"))
    assert disk.read_stored(key, "encoded") is not None  # a file or, this small, inline
    assert cached.engine.calls == ["Mind the gap."]
