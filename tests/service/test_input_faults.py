"""Small input faults on every synthesis route: each is a 400 that names what to fix.

Control characters in text (a NUL was a 500 with Piper: its phonemizer raised in the
sentence split, outside the engine's error boundary), text with nothing to speak (a 502:
"engine produced no audio"), NaN/Infinity numbers (a NaN ttl was written into the
envelope as invalid JSON), and error texts that showed object reprs.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable

import numpy as np
import pytest
import soundfile
from fastapi.testclient import TestClient
from httpx import Response

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}
Route = Callable[[TestClient, str], Response]


def message_of(response: Response) -> str:
    """The message in whichever protocol's error shape the route answers."""
    body = response.json()
    return body.get("message") or body.get("detail") or body["error"]["message"]


ROUTES: dict[str, Route] = {
    "speech": lambda c, text: c.post("/v1/audio/speech",
                                     json={"input": text, "response_format": "wav"}),
    "synthesize": lambda c, text: c.post("/v1/synthesize", json={"text": text}),
    "tts GET": lambda c, text: c.get("/tts", params={"text": text, "text_lang": "en"}),
    "tts POST": lambda c, text: c.post("/tts", json={"text": text, "text_lang": "en"}),
    "inference_sft": lambda c, text: c.post("/inference_sft",
                                            data={"tts_text": text, "spk_id": "alto"}),
}


@pytest.fixture
def client(make_app) -> TestClient:
    app, _ = make_app()
    return TestClient(app)


@pytest.mark.parametrize("route", ROUTES)
def test_a_nul_in_text_is_a_400_naming_it_on_every_route(client: TestClient,
                                                         route: str) -> None:
    response = ROUTES[route](client, "Hello\x00world")
    assert response.status_code == 400, response.text
    message = message_of(response)
    assert "U+0000" in message and "position 5" in message


@pytest.mark.parametrize("route", ROUTES)
def test_text_with_nothing_to_speak_is_a_400_on_every_route(client: TestClient,
                                                            route: str) -> None:
    response = ROUTES[route](client, "...")
    assert response.status_code == 400, response.text
    assert "nothing to speak" in message_of(response)


@pytest.mark.parametrize("text", ["\x01", "\x1b[31mred", "\x7f", "\x9b", "tab\x0bok\x1f"])
def test_other_control_characters_are_refused_by_code_point(client: TestClient,
                                                            text: str) -> None:
    response = ROUTES["speech"](client, f"Say {text}")
    assert response.status_code == 400, response.text
    assert "U+" in message_of(response)


def test_an_unpaired_surrogate_from_json_is_refused(client: TestClient) -> None:
    """JSON can spell a lone surrogate; no UTF-8 encoder (nor engine) can take it. The
    pydantic routes refuse it while parsing; /tts reads raw JSON, so resolution must."""
    json_type = {"Content-Type": "application/json"}
    tts = client.post("/tts", content=b'{"text": "Hi \\ud800 there", "text_lang": "en"}',
                      headers=json_type)
    assert tts.status_code == 400, tts.text
    assert "U+D800" in message_of(tts) and "position 3" in message_of(tts)
    speech = client.post("/v1/audio/speech", content=b'{"input": "Hi \\ud800 there"}',
                         headers=json_type)
    assert speech.status_code == 400


def test_whitespace_controls_are_folded_not_refused(client: TestClient) -> None:
    spaced = ROUTES["speech"](client, "Line one.\tTab.\r\nLine two.\x0c")
    plain = ROUTES["speech"](client, "Line one. Tab. Line two.")
    assert spaced.status_code == plain.status_code == 200
    assert spaced.headers["x-cache-key"] == plain.headers["x-cache-key"]


@pytest.mark.parametrize("text", ["你好，世界。", "こんにちは。", "مرحبا بالعالم", "42", "$", "😀",
                                  "Ⅻ", "Wait...", "¿Qué?"])
def test_letters_digits_and_symbols_in_any_script_are_speakable(client: TestClient,
                                                                text: str) -> None:
    response = ROUTES["speech"](client, text)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("text", ["?!", "— …", "。、！", "« » ( )", " . . . "])
def test_punctuation_alone_has_nothing_to_speak(client: TestClient, text: str) -> None:
    response = ROUTES["speech"](client, text)
    assert response.status_code == 400 and "nothing to speak" in message_of(response)


@pytest.mark.parametrize(("route", "body", "field"), [  # field: what the message names
    ("/v1/synthesize", b'{"text": "hi", "ttl": NaN}', "ttl"),
    ("/v1/synthesize", b'{"text": "hi", "ttl": Infinity}', "ttl"),
    ("/v1/synthesize", b'{"text": "hi", "ttl": -Infinity}', "ttl"),
    ("/v1/synthesize", b'{"text": "hi", "ttl": 1e999}', "ttl"),
    ("/v1/synthesize", b'{"text": "hi", "ttl": 1' + b"0" * 400 + b"}", "ttl"),  # pydantic's
    ("/v1/synthesize", b'{"text": "hi", "speed": NaN}', "speed"),
    ("/v1/synthesize", b'{"text": "hi", "params": {"pitch": NaN}}', "pitch"),
    ("/v1/synthesize", b'{"text": "hi", "params": {"delay": Infinity}}', "delay"),
    ("/v1/synthesize", b'{"text": "hi", "params": {"pitch": 1' + b"0" * 400 + b"}}", "pitch"),
    ("/v1/audio/speech", b'{"input": "hi", "speed": Infinity}', "speed"),
    ("/v1/audio/speech", b'{"input": "hi", "params": {"pitch": -Infinity}}', "pitch"),
    ("/tts", b'{"text": "hi", "text_lang": "en", "speed_factor": NaN}', "speed"),
])
def test_non_finite_numbers_are_refused(make_app, route: str, body: bytes,
                                        field: str) -> None:
    app, cached = make_app()
    response = TestClient(app).post(route, content=body,
                                    headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    message = message_of(response)
    assert field in message and ("finite" in message or "valid number" in message)
    assert len(message) < 300  # a 400-digit number is not echoed back whole
    assert cached.engine.calls == []  # refused before anything was rendered or stored


@pytest.mark.parametrize("upload", ["voices", "synthesize"])
def test_an_undecodable_clip_is_described_without_object_reprs(client: TestClient,
                                                               upload: str) -> None:
    garbage = b"this is not audio " * 20
    if upload == "voices":
        response = client.post("/v1/voices", files={"file": ("clip.wav", garbage)})
    else:
        response = client.post("/v1/synthesize", json={
            "text": "hi", "reference_audio": base64.b64encode(garbage).decode()})
    assert response.status_code == 400
    message = message_of(response)
    assert "could not be decoded" in message and "not recognised" in message.lower()
    assert " at 0x" not in message and "<_io" not in message


def test_a_valid_clip_still_uploads(client: TestClient) -> None:
    rate = 16000
    out = io.BytesIO()
    soundfile.write(out, 0.3 * np.sin(np.arange(rate) / rate * 2 * np.pi * 220), rate,
                    format="WAV")
    assert client.post("/v1/voices", files={"file": ("a.wav", out.getvalue())}
                       ).status_code == 201


@pytest.mark.piper
def test_with_piper_a_nul_was_a_500_and_dots_a_502_now_both_400(make_app, piper) -> None:
    """The shipped setup: Piper in segment mode. The NUL reached espeak in the sentence split
    (ValueError: embedded null character, outside the render's error boundary: 500); "..."
    reached the engine and came back silent (502)."""
    app, _ = make_app(engine=piper, segments=True)
    client = TestClient(app, raise_server_exceptions=False)
    for text, words in (("Hello\x00world.", ("U+0000", "position 5")),
                        ("...", ("nothing to speak",))):
        response = client.post("/v1/audio/speech", json={
            "input": text, "response_format": "wav", "params": DETERMINISTIC})
        assert response.status_code == 400, response.text
        for word in words:
            assert word in message_of(response)
    spoken = client.post("/v1/audio/speech", json={
        "input": "Hello world.", "response_format": "wav", "params": DETERMINISTIC})
    assert spoken.status_code == 200
