"""``/v1/audio/speech`` answers as OpenAI's server does, checked with the official client.

From the OpenAI API reference and the ``openai`` client: ``pcm`` is 24 kHz 16-bit mono;
an unknown voice is a 400 ``invalid_request_error`` whose ``param`` is ``voice``
(``openai.BadRequestError``); SSE sends ``speech.audio.delta`` events whose base64 audio
concatenates into one file, then ``speech.audio.done`` with ``usage``; a WAV is a plain
44-byte header and the samples. The reference resample is computed here with libsoxr
directly, so the test does not trust the code it checks.
"""

from __future__ import annotations

import base64
import io
import json
import math
import struct

import httpx
import numpy as np
import openai
import pytest
import soundfile
import soxr
from fastapi.testclient import TestClient

from voxcache.testing.stored import overwrite_stored, stored_bytes

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}
THREE = "First sentence here. Second one follows. And a third."


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def resampled(pcm: bytes, rate: int, target: int = 24000) -> bytes:
    """The whole take at ``target``: libsoxr "HQ" on float samples, rounded to int16."""
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    y = soxr.resample(x, rate, target, quality="HQ")
    return np.clip(np.rint(y * 32768.0), -32768, 32767).astype("<i2").tobytes()


def native_pcm(c: TestClient | httpx.Client, text: str, **extra: object) -> tuple[bytes, int]:
    """The take at the engine's own rate, from the native route (and its rate)."""
    r = c.post("/v1/synthesize", json={"text": text, "response_format": "pcm", **extra})
    assert r.status_code == 200, r.text
    rate = int(r.headers["content-type"].split("rate=")[1].split(";")[0])
    return r.content, rate


def sse_events(lines) -> list[dict]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


def wav_fields(data: bytes) -> dict[str, int | bytes]:
    """The fields of a plain 44-byte PCM WAV header."""
    riff, size, wave, fmt, fmt_len, tag, channels, rate, byte_rate, align, bits, data_id, \
        data_len = struct.unpack("<4sI4s4sIHHIIHH4sI", data[:44])
    return {"riff": riff, "size": size, "wave": wave, "fmt": fmt, "fmt_len": fmt_len,
            "tag": tag, "channels": channels, "rate": rate, "byte_rate": byte_rate,
            "align": align, "bits": bits, "data": data_id, "data_len": data_len}


# ---- pcm is 24 kHz ----------------------------------------------------------------------------

@pytest.mark.piper
def test_official_client_decodes_piper_pcm_at_24_khz(make_app, live, piper) -> None:
    """Piper renders 22,050 Hz; the client plays pcm at 24 kHz, so voxcache must send 24 kHz:
    the decoded duration equals the take's within a sample, miss (streamed sentence by
    sentence) and hit alike, and the samples are the whole take resampled."""
    app, _ = make_app(engine=piper)
    text = "Good morning. Today's weather is sunny with a high of twenty-four degrees."
    with live(app) as server:
        takes = []
        for expected in ("MISS", "HIT"):
            with client(server.url).audio.speech.with_streaming_response.create(
                    model="tts-1", voice="alloy", input=text, response_format="pcm",
                    extra_body={"params": DETERMINISTIC}) as response:
                assert response.headers["x-cache"] == expected
                assert "rate=24000" in response.headers["content-type"]
                takes.append((b"".join(response.iter_bytes()), response.headers["x-cache-key"]))
        with httpx.Client(base_url=server.url, timeout=60) as c:
            native, rate = native_pcm(c, text, params=DETERMINISTIC)
    (miss, key), (hit, hit_key) = takes
    assert key == hit_key and rate == 22050
    decoded = np.frombuffer(miss, dtype="<i2")
    take_seconds = len(native) / 2 / rate
    assert abs(len(decoded) / 24000 - take_seconds) <= 1 / 24000
    assert miss == hit == resampled(native, rate)


def test_streamed_pcm_is_the_whole_take_resampled_with_no_click_at_joins(tone_server) -> None:
    """Three sentences arrive as three chunks; each is resampled as it comes, and the
    concatenation is sample for sample the whole take resampled (a filter restarted per
    chunk would differ around every join)."""
    live, cached = tone_server
    with client(live.url).audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=THREE, response_format="pcm") as response:
        assert response.headers["x-cache"] == "MISS"
        streamed = b"".join(response.iter_bytes())
    other = "One more. And another one. Then the last."
    with httpx.Client(base_url=live.url, timeout=30) as c:
        native, rate = native_pcm(c, THREE)
        sse = c.post("/v1/audio/speech", json={"input": other, "response_format": "pcm",
                                               "stream_format": "sse"})
        sse_native, _ = native_pcm(c, other)
    assert rate == 16000 and len(cached.engine.calls) == 2  # the SSE request was a miss too
    assert sse.headers["x-cache"] == "MISS"
    assert streamed == resampled(native, rate)
    deltas = [e for e in sse_events(sse.text.splitlines()) if e["type"] == "speech.audio.delta"]
    assert len(deltas) > 3  # sentence by sentence, then the filter's tail
    assert b"".join(base64.b64decode(d["audio"]) for d in deltas) == resampled(sse_native, rate)


def test_the_24_khz_delivery_is_cached_on_disk_and_a_corrupt_copy_is_never_sent(
        tone_server) -> None:
    live, cached = tone_server
    body = {"input": "Mind the gap.", "response_format": "pcm"}
    with httpx.Client(base_url=live.url, timeout=30) as c:
        first = c.post("/v1/audio/speech", json=body).content  # a miss, streamed
        assert c.post("/v1/audio/speech", json=body).content == first  # encoded once here
        rows = cached.cache.folder.index.rows("kind = 'encoded'")
        assert len(rows) == 1  # the 24 kHz take, stored beside its PCM
        cached.cache.in_process.clear()
        second = c.post("/v1/audio/speech", json=body)
        assert second.headers["x-cache"] == "HIT" and second.content == first
        assert cached.cache.session_counts().get("encoded_hits") == 1
        blob = bytearray(stored_bytes(cached.cache, rows[0].key, "encoded") or b"")
        blob[-100] ^= 0xFF  # one flipped bit in the samples
        overwrite_stored(cached.cache, rows[0].key, "encoded", bytes(blob))
        cached.cache.in_process.clear()
        third = c.post("/v1/audio/speech", json=body)
    assert third.status_code == 200 and third.content == first  # re-encoded, not the bad copy
    assert len(cached.engine.calls) == 1


def test_native_route_keeps_the_engine_rate(make_app) -> None:
    app, cached = make_app()
    c = TestClient(app)
    r = c.post("/v1/synthesize", json={"text": "Native rate.", "response_format": "pcm"})
    assert r.headers["content-type"].startswith("audio/pcm;rate=16000")
    stored = c.get(f"/v1/audio/{r.headers['x-cache-key']}").content
    assert stored.endswith(r.content) and len(r.content) % 2 == 0


# ---- errors -----------------------------------------------------------------------------------

def test_unknown_voice_is_a_bad_request_naming_voice_and_every_alias(make_app, live) -> None:
    app, _ = make_app(sections={"voice_aliases": {"announcer": "alto"}})
    with live(app) as server:
        with pytest.raises(openai.BadRequestError) as err:
            client(server.url).audio.speech.create(model="tts-1", voice="nobody", input="hi")
        aliases = httpx.get(f"{server.url}/v1/voices").json()["aliases"]
        ok = client(server.url).audio.speech.with_raw_response.create(
            model="tts-1", voice="announcer", input="hi", response_format="wav")
    assert err.value.status_code == 400
    assert (err.value.param, err.value.type, err.value.code) == (
        "voice", "invalid_request_error", "invalid_value")
    for name in ("nobody", "alto", "bass", "alloy", "nova", "cedar", "announcer"):
        assert repr(name) in err.value.message, name
    assert aliases["announcer"] == "alto" and aliases["alloy"] == "alto"
    assert ok.headers["x-cache"] == "MISS"


REFUSALS = [  # body, status, param, code — OpenAI's code where OpenAI has one
    ({"input": "hi", "voice": "nobody"}, 400, "voice", "invalid_value"),
    ({"input": "hi", "voice": "vc_" + "0" * 24}, 400, "voice", "invalid_value"),
    ({"input": "hi", "voice": {"id": 7}}, 400, "voice", "invalid_type"),
    ({"input": "hi", "response_format": "ogg"}, 400, "response_format", "invalid_value"),
    ({"input": "hi", "model": "eleven-v3"}, 400, "model", "invalid_value"),
    ({"input": "hi", "speed": 10}, 400, "speed", "invalid_value"),
    ({"input": "hi", "speed": "fast"}, 400, "speed", "invalid_type"),
    ({"input": "hi", "stream_format": "video"}, 400, "stream_format", "invalid_value"),
    ({"input": "hi", "surprise": 1}, 400, "surprise", "unknown_parameter"),
    ({"voice": "alloy"}, 400, "input", "missing_required_parameter"),
    ({"input": "   "}, 400, "input", "invalid_value"),
    ({"input": "..."}, 400, "input", "invalid_value"),
    ({"input": "a\u0000b"}, 400, "input", "invalid_value"),
    ({"input": "hi", "language": "klingon"}, 400, "language", "unsupported_value"),
    ({"input": "hi", "params": {"temperature": 1}}, 400, "params", "invalid_value"),
    ({"input": "hi", "seed": -5}, 400, "seed", "invalid_value"),
    ({"input": "hi", "seed_policy": "sometimes"}, 400, "seed_policy", "invalid_value"),
    ({"input": "hi", "voice": "nobody", "speed": 10}, 400, "voice", "invalid_value"),
]


@pytest.mark.parametrize(("body", "status", "param", "code"), REFUSALS)
def test_every_refusal_is_shaped_like_openais(make_app, body, status, param, code) -> None:
    app, cached = make_app()
    r = TestClient(app).post("/v1/audio/speech", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error", param, code), error
    assert error["message"]
    assert cached.engine.calls == []


def test_refusals_with_no_single_field_at_fault_say_param_null(make_app) -> None:
    app, _ = make_app()
    c = TestClient(app)
    bad_json = c.post("/v1/audio/speech", content=b"{not json",
                      headers={"content-type": "application/json"})
    two_fields = c.post("/v1/audio/speech", json={"speed": "x", "surprise": 1})
    header = c.post("/v1/audio/speech", json={"input": "hi"}, headers={"X-Cache-Mode": "often"})
    for r in (bad_json, two_fields, header):
        assert r.status_code == 400
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["param"] is None


# ---- SSE --------------------------------------------------------------------------------------

def test_sse_wav_deltas_concatenate_to_one_wav(tone_server) -> None:
    """A hit: one header whose lengths match the data. A miss: one streaming header
    (0xFFFFFFFF, as OpenAI streams WAV) then every sample — never a header per chunk."""
    live, _ = tone_server
    files = {}
    for expected in ("MISS", "HIT"):
        with client(live.url).audio.speech.with_streaming_response.create(
                model="gpt-4o-mini-tts", voice="alloy", input=THREE, response_format="wav",
                stream_format="sse") as response:
            assert response.headers["x-cache"] == expected
            events = sse_events(response.iter_lines())
        files[expected] = b"".join(base64.b64decode(e["audio"]) for e in events
                                   if e["type"] == "speech.audio.delta")
    native, rate = native_pcm(httpx.Client(base_url=live.url, timeout=60), THREE)
    for expected, data in files.items():
        assert data.count(b"RIFF") == 1 and data.count(b"WAVEfmt ") == 1, expected
        header = wav_fields(data)
        assert (header["rate"], header["channels"], header["bits"]) == (rate, 1, 16)
        assert data[44:] == native, expected
        samples, decoded_rate = soundfile.read(io.BytesIO(data), dtype="int16")
        assert decoded_rate == rate and samples.tobytes() == native, expected
    hit = wav_fields(files["HIT"])
    assert hit["data_len"] == len(native) and hit["size"] == 36 + len(native)
    assert wav_fields(files["MISS"])["data_len"] == 0xFFFFFFFF


@pytest.mark.parametrize("fmt", ["mp3", "flac", "opus"])
def test_sse_encoded_formats_concatenate_to_one_file(tone_server, fmt: str) -> None:
    """A miss: mp3 and opus are sent in pieces as the encoder makes them (mp3 as
    constant-bitrate frames, which decode whole without the info frame), flac in one
    delta at the end. A hit: the stored encoding in one delta. Each concatenation decodes
    as the take, within the codec's padding."""
    live, _ = tone_server
    text = f"Encoded {fmt} one. Encoded {fmt} two. Encoded {fmt} three."
    with httpx.Client(base_url=live.url, timeout=30) as c:
        pieces = {}
        for expected in ("MISS", "HIT"):
            r = c.post("/v1/audio/speech", json={"input": text, "response_format": fmt,
                                                 "stream_format": "sse"})
            assert r.headers["x-cache"] == expected
            events = sse_events(r.text.splitlines())
            assert events[-1]["type"] == "speech.audio.done"
            pieces[expected] = [base64.b64decode(e["audio"]) for e in events[:-1]]
        native, rate = native_pcm(c, text)
    if fmt == "flac":
        assert len(pieces["MISS"]) == 1
    else:  # mp3: frames per sentence; opus: its header pages at once, audio pages as filled
        assert len(pieces["MISS"]) >= {"mp3": 3, "opus": 2}[fmt]
    assert len(pieces["HIT"]) == 1
    for expected, parts in pieces.items():
        samples, decoded_rate = soundfile.read(io.BytesIO(b"".join(parts)), dtype="int16")
        seconds = len(native) / 2 / rate
        assert abs(len(samples) / decoded_rate - seconds) < 0.12, expected  # codec padding


def test_sse_done_carries_usage_by_the_documented_measure(tone_server) -> None:
    live, _ = tone_server
    text = "Thank you for calling — 请稍候. Your call matters."
    usages = []
    for _ in ("miss", "hit"):
        with client(live.url).audio.speech.with_streaming_response.create(
                model="gpt-4o-mini-tts", voice="alloy", input=text, response_format="pcm",
                stream_format="sse") as response:
            events = sse_events(response.iter_lines())
        assert [e["type"] for e in events][-1] == "speech.audio.done"
        assert all(set(e) == {"type", "audio"} for e in events[:-1])
        pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
        usages.append((events[-1]["usage"], len(pcm) // 2))
    (miss, frames), (hit, hit_frames) = usages
    assert miss == hit and frames == hit_frames
    assert miss["input_tokens"] == math.ceil(len(text.encode()) / 4)  # ~4 bytes a token
    assert miss["output_tokens"] == math.ceil(frames * 20 / 24000) > 0  # one per 50 ms
    assert miss["total_tokens"] == miss["input_tokens"] + miss["output_tokens"]


# ---- delivered WAV ----------------------------------------------------------------------------

def test_delivered_wav_is_a_plain_44_byte_header_then_the_pcm(tone_server) -> None:
    live, _ = tone_server
    c = client(live.url)
    bodies = {}
    for expected in ("MISS", "HIT"):
        r = c.audio.speech.with_raw_response.create(
            model="tts-1", voice="alloy", input="Drop the header.", response_format="wav")
        assert r.headers["x-cache"] == expected
        bodies[expected] = (r.parse().content, r.headers)
    native, rate = native_pcm(httpx.Client(base_url=live.url, timeout=60), "Drop the header.")
    (wav, headers), (hit, _) = bodies["MISS"], bodies["HIT"]
    assert wav == hit and b"vxch" not in wav
    assert wav[44:] == native  # a client that drops 44 bytes gets exactly the samples
    header = wav_fields(wav)
    assert header == {"riff": b"RIFF", "size": 36 + len(native), "wave": b"WAVE",
                      "fmt": b"fmt ", "fmt_len": 16, "tag": 1, "channels": 1, "rate": rate,
                      "byte_rate": 2 * rate, "align": 2, "bits": 16, "data": b"data",
                      "data_len": len(native)}
    assert int(headers["content-length"]) == len(wav)
    key = headers["x-cache-key"]
    stored = httpx.get(f"{live.url}/v1/audio/{key}", timeout=60)
    assert stored.headers["x-voxcache-envelope"] == "vxch" and b"vxch" in stored.content
    assert stored.content.endswith(native)
    assert stored.headers["etag"] != headers["etag"]  # two representations, two tags


def test_a_take_already_at_24_khz_is_sent_as_stored(make_app) -> None:
    """An engine at 24 kHz (OpenAI's own, Kokoro): pcm is the stored samples themselves,
    with nothing encoded or stored beside them."""
    from voxcache.engines.tone import ToneEngine

    class Tone24k(ToneEngine):
        sample_rate = 24000

    app, cached = make_app(engine=Tone24k())
    c = TestClient(app)
    body = {"input": "Already at the rate.", "response_format": "pcm"}
    miss, hit = c.post("/v1/audio/speech", json=body), c.post("/v1/audio/speech", json=body)
    assert (miss.headers["x-cache"], hit.headers["x-cache"]) == ("MISS", "HIT")
    stored = c.get(f"/v1/audio/{hit.headers['x-cache-key']}").content
    assert miss.content == hit.content and stored.endswith(hit.content)
    assert "rate=24000" in hit.headers["content-type"]
    assert cached.cache.folder.index.rows("kind = 'encoded'") == []
