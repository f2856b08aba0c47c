"""An upstream's error text reaches the client without the upstream's insides: no absolute
paths (the file's name stays), no traceback frames, no object addresses, no HTML."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.engines.tone import ToneEngine
from voxcache.errors import EngineError, UpstreamError
from voxcache.protocols.gpt_sovits.fields import reference_params
from voxcache.references import ReferenceFolders
from voxcache.upstream import load_upstream
from voxcache.upstream.http import error_message

from .conftest import gateway_app
from .servers import serve_app
from .standins import CRASH_TEXT, gpt_sovits_app, tone, wav_bytes


def gateway(url: str, root: Path, cache: Cache, **options) -> CachedEngine:
    """The GPT-SoVITS gateway with ``root`` as its one reference folder (holding ``a.wav``)."""
    (root / "a.wav").write_bytes(wav_bytes(tone("reference", 16000), 16000))
    return CachedEngine(load_upstream(f"gpt-sovits={url}", references=ReferenceFolders([root]),
                                      **options), cache)


def ask(cached: CachedEngine, text: str) -> SynthesisRequest:
    refs = reference_params(cached.engine.references, "a.wav")
    return SynthesisRequest(text, language="en", params=refs)


@pytest.fixture
def upstream(ref_dir):
    app = gpt_sovits_app(ref_dir)
    with serve_app(app) as url:
        yield url


def assert_clean(message: str, *server_paths: str) -> None:
    for path in server_paths:
        assert path not in message, message
    for leak in ("Traceback", 'File "', "line ", " at 0x", "/tmp/", "standins.py"):
        assert leak not in message, message


def test_a_traceback_in_exception_becomes_its_last_line(upstream, ref_dir, tmp_path,
                                                        cache: Cache) -> None:
    cached = gateway(upstream, ref_dir, cache)
    with pytest.raises(UpstreamError) as caught:
        cached.synthesize(ask(cached, CRASH_TEXT))
    message = str(caught.value)
    assert "tts failed" in message and "FileNotFoundError" in message
    assert "…/missing.ckpt" in message  # the file a message is about keeps its name
    assert_clean(message, str(ref_dir), str(tmp_path))


def test_a_path_in_exception_keeps_only_its_file_name(upstream, ref_dir, tmp_path,
                                                      cache: Cache) -> None:
    # the upstream mounts the reference folder where it has no such file, and answers with
    # its own absolute path to it
    cached = gateway(upstream, ref_dir, cache, ref_root_upstream=str(tmp_path / "upstream-side"))
    with pytest.raises(UpstreamError) as caught:
        cached.synthesize(ask(cached, "Hi."))
    message = str(caught.value)  # the gateway loads the clip first (it may have changed)
    assert "loading the reference clip" in message and "…/a.wav" in message
    assert caught.value.upstream_reply == {"message": "tts failed",
                                           "Exception": "…/a.wav not exists"}
    assert_clean(message, str(ref_dir), str(tmp_path))


def test_the_tts_route_answers_the_clean_text(upstream, ref_dir, tmp_path,
                                              cache: Cache) -> None:
    app = gateway_app(gateway(upstream, ref_dir, cache))
    with serve_app(app) as url:
        failed = httpx.post(f"{url}/tts", timeout=30, json={
            "text": CRASH_TEXT, "text_lang": "en", "ref_audio_path": "a.wav",
            "prompt_lang": "en"})
    assert failed.status_code == 400, failed.text  # the upstream's refusal keeps its status
    assert failed.json()["message"] == "tts failed"  # and api_v2's own fields
    assert "FileNotFoundError" in failed.json()["Exception"]
    assert_clean(failed.text, str(ref_dir), str(tmp_path))


@pytest.mark.parametrize(("body", "kept", "gone"), [
    (b'{"message": "tts failed", "Exception": "[Errno 2] No such file or directory: '
     b"'C:\\\\Users\\\\ana\\\\GPT-SoVITS\\\\refs\\\\voice.wav'\"}",
     ["tts failed", "No such file or directory", "voice.wav"], ["Users", "ana", "C:"]),
    (b'{"message": "tts failed", "Exception": "cannot open /home/ana/My Voices/ref.wav"}',
     ["cannot open", "ref.wav"], ["/home/ana"]),
    (b'{"message": "tts failed", "Exception": "cannot open \'/home/ana/My Voices/ref.wav\'"}',
     ["cannot open", "ref.wav"], ["/home/ana", "My Voices"]),
    (b'{"error": {"message": "Error opening <_io.BytesIO object at 0x7f3a2c1e9b20>"}}',
     ["Error opening", "BytesIO"], ["0x7f3a2c1e9b20"]),
    (b'{"detail": "model /srv/models/xtts/model.pth failed to load"}',
     ["failed to load", "model.pth"], ["/srv/models"]),
    (b"<!doctype html><html><head><title>FileNotFoundError: /opt/app/ref.wav // Werkzeug "
     b"Debugger</title></head><body><div class=traceback><pre>File \"/opt/app/app.py\", "
     b"line 12</pre></div><script>var SECRET = 'x';</script></body></html>",
     ["FileNotFoundError", "ref.wav", "Werkzeug Debugger"], ["/opt/app", "SECRET", "<"]),
    (b"Traceback (most recent call last):\n  File \"/usr/lib/python3/x.py\", line 3, in f\n"
     b"    raise ValueError('bad speed')\nValueError: bad speed\n",
     ["ValueError: bad speed"], ["/usr/lib", "Traceback", "raise"]),
])
def test_error_message_shapes(body: bytes, kept: list[str], gone: list[str]) -> None:
    message = error_message(body)
    for word in kept:
        assert word in message, message
    for word in gone:
        assert word not in message, message


@pytest.mark.parametrize("text", [
    "text_lang: xx is not supported in version v2",
    "see http://127.0.0.1:9880/docs for the fields",
    "top_k must be 1/2 of the batch, and/or smaller",
    "speed_factor must be in [0.5, 2.0]",
])
def test_ordinary_messages_pass_unchanged(text: str) -> None:
    assert error_message(json.dumps({"message": text}).encode()) == text


class BrokenModel(ToneEngine):
    """An embedded engine whose model fails the way a missing weights file does."""

    def render(self, request):
        raise FileNotFoundError(2, "No such file or directory", "/opt/models/private/joe.onnx")
        yield  # a generator, like every engine's render


def test_an_embedded_engine_failure_is_scrubbed_too(cache: Cache) -> None:
    with pytest.raises(EngineError) as caught:
        CachedEngine(BrokenModel(), cache).synthesize(SynthesisRequest("Hello."))
    message = str(caught.value)
    assert "No such file or directory" in message and "…/joe.onnx" in message
    assert "/opt/models" not in message
