"""Every bad input gets its 4xx with a message; tenants are walled off from each other."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile
from fastapi.testclient import TestClient

KEYS = {"A": "key-of-tenant-a", "B": "key-of-tenant-b"}


def clip(seconds: float = 1.0, freq: float = 220.0, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    out = io.BytesIO()
    soundfile.write(out, 0.3 * np.sin(2 * np.pi * freq * t), rate, format="WAV")
    return out.getvalue()


@pytest.fixture
def client(make_app) -> TestClient:
    app, _ = make_app(max_body_bytes=4096, max_upload_bytes=200_000, max_upload_seconds=5)
    return TestClient(app)


@pytest.fixture
def tenants(make_app) -> TestClient:
    app, _ = make_app(api_keys={KEYS["A"]: "acme", KEYS["B"]: "globex"})
    return TestClient(app)


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def assert_error(response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    assert response.json()["error"]["type"]
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"input": "   "}, 400, ["empty"]),
    ({"input": "hi", "voice": "nobody"}, 400, ["nobody", "alto", "alloy"]),  # OpenAI: 400
    ({"input": "hi", "params": {"temperature": 1}}, 400, ["temperature", "accepts"]),
    ({"input": "hi", "params": {"pitch": "high"}}, 400, ["pitch"]),
    ({"input": "hi", "response_format": "wma"}, 400, ["wma", "supported", "mp3"]),
    ({"input": "hi", "response_format": "ogg"}, 400, ["supported"]),
    ({"input": "hi", "speed": 10}, 400, ["speed"]),
    ({"input": "hi", "surprise": 1}, 400, ["surprise"]),
    ({"input": "hi", "model": "eleven-v3"}, 400, ["eleven-v3", "tone"]),
    ({"input": "hi", "stream_format": "video"}, 400, ["stream_format"]),
    ({"voice": "alto"}, 400, ["input"]),
    ({"input": "hi", "language": "klingon"}, 400, ["language"]),
])
def test_bad_speech_requests(client: TestClient, body: dict, status: int, words: list) -> None:
    assert_error(client.post("/v1/audio/speech", json=body), status, *words)


def test_malformed_and_huge_bodies(client: TestClient) -> None:
    r = client.post("/v1/audio/speech", content=b"{not json", headers={
        "content-type": "application/json"})
    assert_error(r, 400, "invalid request")
    assert_error(client.post("/v1/audio/speech", json={"input": "x" * 10_000}), 413, "limit")
    assert_error(client.post("/v1/synthesize", json={"text": "hi", "reference_audio": "***"}),
                 400, "base64")


def test_bad_uploads(client: TestClient) -> None:
    def upload(data: bytes, **form: str):
        return client.post("/v1/voices", files={"file": ("clip.wav", data)}, data=form)

    assert_error(upload(b"RIFF this is not audio"), 400, "could not be decoded")
    assert_error(upload(b""), 400, "empty")
    assert_error(upload(clip(seconds=8, rate=8000)), 400, "limit")  # 8 s > 5 s
    assert_error(upload(b"\0" * 300_000), 413, "limit")
    assert client.post("/v1/voices", data={"prompt_text": "x"}).status_code == 400


def test_unknown_entries_and_voices_are_404(client: TestClient) -> None:
    assert_error(client.get("/v1/audio/" + "0" * 64), 404, "no entry")
    assert_error(client.get("/v1/audio/not-a-key"), 404, "no entry")
    assert_error(client.get("/v1/voices/vc_" + "0" * 24), 404, "no voice")
    assert_error(client.delete("/v1/voices/alto"), 404, "built-in")


def test_bad_auth(tenants: TestClient) -> None:
    assert_error(tenants.post("/v1/audio/speech", json={"input": "hi"}), 401, "API key")
    r = tenants.post("/v1/audio/speech", json={"input": "hi"},
                     headers={"Authorization": "Bearer wrong-key-123"})
    assert_error(r, 401, "unknown API key")
    assert tenants.get("/healthz").status_code == 200


def test_piper_cannot_clone_an_uploaded_voice(make_app, piper) -> None:
    app, _ = make_app(engine=piper)
    c = TestClient(app)
    voice = c.post("/v1/voices", files={"file": ("c.wav", clip())},
                   data={"prompt_text": "a tone"}).json()
    assert voice["can_render"] is False
    r = c.post("/v1/audio/speech", json={"input": "hello", "voice": voice["id"]})
    assert_error(r, 400, "cannot clone", "en_US-joe-medium")


def test_voice_upload_is_content_addressed_and_used_for_cloning(make_app) -> None:
    app, cached = make_app()
    c = TestClient(app)
    wav = clip(freq=330)
    flac = io.BytesIO()
    soundfile.write(flac, soundfile.read(io.BytesIO(wav))[0], 16000, format="FLAC")
    first = c.post("/v1/voices", files={"file": ("a.wav", wav)}, data={"prompt_text": "Hi."})
    again = c.post("/v1/voices", files={"file": ("b.flac", flac.getvalue())},
                   data={"prompt_text": "Hi."})
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]  # same sound, other container: one voice
    voice = first.json()["id"]
    listed = c.get("/v1/voices").json()
    assert [v["id"] for v in listed["voices"] if v["kind"] == "uploaded"] == [voice]
    assert {"alto", "bass"} <= {v["id"] for v in listed["voices"]}
    a = c.post("/v1/audio/speech", json={"input": "Cloned.", "voice": voice,
                                         "response_format": "wav"})
    b = c.post("/v1/audio/speech", json={"input": "Cloned.", "voice": {"id": voice},
                                         "response_format": "wav"})
    assert (a.headers["x-cache"], b.headers["x-cache"]) == ("MISS", "HIT")
    plain = c.post("/v1/audio/speech", json={"input": "Cloned.", "response_format": "wav"})
    assert plain.headers["x-cache-key"] != a.headers["x-cache-key"]
    assert len(cached.engine.calls) == 2
    assert c.delete(f"/v1/voices/{voice}").status_code == 204
    assert c.get(f"/v1/voices/{voice}").status_code == 404


def test_privacy_mode_keeps_no_clip_but_serves_stored_takes(make_app, tmp_path) -> None:
    app, _ = make_app()
    c = TestClient(app)
    wav = clip(freq=440)
    public = c.post("/v1/voices", files={"file": ("a.wav", wav)}, data={"prompt_text": "P."})
    voice = public.json()["id"]
    assert c.post("/v1/audio/speech", json={"input": "Stored.", "voice": voice}).status_code == 200
    c.delete(f"/v1/voices/{voice}")
    private = c.post("/v1/voices", files={"file": ("a.wav", wav)},
                     data={"prompt_text": "P.", "privacy": "true"}).json()
    assert private["id"] == voice and private["private"] is True
    assert not list((tmp_path / "cache" / "voices").rglob("clip"))
    r = c.post("/v1/audio/speech", json={"input": "Stored.", "voice": voice})
    assert r.status_code == 200 and r.headers["x-cache"] == "HIT"
    assert_error(c.post("/v1/audio/speech", json={"input": "New text.", "voice": voice}),
                 409, "privacy")


def test_tenant_cannot_read_list_probe_or_delete_anothers(tenants: TestClient) -> None:
    a, b = auth("A"), auth("B")
    r = tenants.post("/v1/audio/speech", json={"input": "Secret.", "response_format": "wav"},
                     headers=a)
    key = r.headers["x-cache-key"]
    assert tenants.get(f"/v1/audio/{key}", headers=a).status_code == 200
    assert_error(tenants.get(f"/v1/audio/{key}", headers=b), 404, "no entry")
    assert tenants.head(f"/v1/audio/{key}", headers=b).status_code == 404
    assert [e["key"] for e in tenants.get("/v1/entries", headers=a).json()["entries"]] == [key]
    assert tenants.get("/v1/entries", headers=b).json()["entries"] == []
    assert_error(tenants.delete(f"/v1/entries/{key}", headers=b), 404, "no entry")
    assert_error(tenants.put(f"/v1/entries/{key}/pin", headers=b), 404, "no entry")
    assert_error(tenants.delete(f"/v1/entries/{key}/pin", headers=b), 404, "no entry")
    assert tenants.put(f"/v1/entries/{key}/pin", headers=a).status_code == 204
    # The same text for B is B's own take under another key, never A's.
    rb = tenants.post("/v1/audio/speech", json={"input": "Secret.", "response_format": "wav"},
                      headers=b)
    assert rb.headers["x-cache"] == "MISS" and rb.headers["x-cache-key"] != key

    voice = tenants.post("/v1/voices", files={"file": ("a.wav", clip())}, headers=a).json()["id"]
    assert tenants.get(f"/v1/voices/{voice}", headers=a).status_code == 200
    assert_error(tenants.get(f"/v1/voices/{voice}", headers=b), 404, "no voice")
    assert voice not in {v["id"] for v in tenants.get("/v1/voices", headers=b).json()["voices"]}
    # On the OpenAI route an unknown voice is OpenAI's 400, and another tenant's id is just that
    assert_error(tenants.post("/v1/audio/speech", json={"input": "x", "voice": voice},
                              headers=b), 400, "no voice")
    assert_error(tenants.delete(f"/v1/voices/{voice}", headers=b), 404, "no voice")
    assert tenants.get(f"/v1/voices/{voice}", headers=a).status_code == 200
    assert tenants.delete(f"/v1/entries/{key}", headers=a).status_code == 204
    assert tenants.get(f"/v1/audio/{key}", headers=a).status_code == 404
