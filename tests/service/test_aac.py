"""OpenAI's ``aac`` on ``/v1/audio/speech``, asked with the official ``openai`` client: AAC
in ADTS frames, encoded by ffmpeg, when this machine has ffmpeg; a 400 that names ffmpeg
when it does not (a real ``voxcache serve`` whose PATH holds no ffmpeg).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from voxcache.testing import forked
from voxcache.testing.servers import clean_env, free_port

FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None, reason="needs ffmpeg (scripts/test.sh "
                                                         "installs it)")


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def decoded(adts: bytes, rate: int) -> np.ndarray:
    """The samples ffmpeg decodes from the ADTS stream (16-bit mono at ``rate``)."""
    assert FFMPEG is not None
    done = subprocess.run([FFMPEG, "-loglevel", "error", "-f", "aac", "-i", "pipe:0", "-f",
                           "s16le", "-ac", "1", "-ar", str(rate), "pipe:1"], input=adts,
                          capture_output=True, check=True)
    return np.frombuffer(done.stdout, dtype="<i2")


@contextlib.contextmanager
def serve(tmp_path: Path, path: str) -> Iterator[str]:
    port = free_port()
    env = clean_env()
    proc = forked.popen([sys.executable, "-m", "voxcache", "--cache-dir",
                         str(tmp_path / "cache"), "--engine", "tone", "serve", "--port",
                         str(port)], env={**env, "PATH": path},
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@needs_ffmpeg
def test_aac_through_the_openai_client_is_adts_that_decodes_to_the_take(tone_server) -> None:
    live, cached = tone_server
    text = "Your order is ready."
    first = client(live.url).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=text, response_format="aac")
    assert first.http_response.content and first.headers["x-cache"] == "MISS"
    response = client(live.url).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=text, response_format="aac")
    adts = response.http_response.content
    assert response.headers["content-type"] == "audio/aac"
    assert response.headers["x-cache"] == "HIT"  # the second ask: the encoding is stored
    assert adts[0] == 0xFF and adts[1] & 0xF6 == 0xF0  # an ADTS frame's sync word, layer 0
    assert adts == first.http_response.content  # the stored encoding, byte for byte
    wav = client(live.url).audio.speech.create(model="tts-1", voice="alloy", input=text,
                                               response_format="wav").read()
    rate = int.from_bytes(wav[24:28], "little")
    take = np.frombuffer(wav[44:], dtype="<i2").astype(np.float64)
    heard = decoded(adts, rate).astype(np.float64)
    # AAC adds its priming delay and pads the last frame: the decoded take is the WAV's
    # length give or take a few frames, and carries the same energy
    assert abs(len(heard) - len(take)) <= 3 * 1024, (len(heard), len(take))
    assert np.sum(heard**2) == pytest.approx(np.sum(take**2), rel=0.1)
    assert cached.engine.calls == [text]  # aac twice, then wav: one render


def test_without_ffmpeg_aac_is_a_400_that_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "no-ffmpeg"
    empty.mkdir()  # PATH with nothing on it: no ffmpeg to be found
    with serve(tmp_path, str(empty)) as url:
        with pytest.raises(openai.BadRequestError) as refused:
            client(url).audio.speech.create(model="tts-1", voice="alloy", input="Hello.",
                                            response_format="aac")
        error = refused.value.body
        assert refused.value.status_code == 400
        assert isinstance(error, dict)
        assert "ffmpeg" in error["message"] and "apt-get install ffmpeg" in error["message"]
        assert "supported: wav, pcm" in error["message"]
        assert (error["param"], error["code"]) == ("response_format", "unsupported_value")
        assert "aac" not in httpx.get(f"{url}/v1/engine").json()["formats"]
        ok = client(url).audio.speech.create(model="tts-1", voice="alloy", input="Hello.",
                                             response_format="wav")
        assert ok.read()[:4] == b"RIFF"  # everything else still served


@needs_ffmpeg
def test_with_ffmpeg_the_engine_lists_aac(tmp_path: Path) -> None:
    with serve(tmp_path, os.environ["PATH"]) as url:
        assert "aac" in httpx.get(f"{url}/v1/engine").json()["formats"]
