"""An OpenAI-kind miss streams as the upstream streams, as GPT-SoVITS and CosyVoice misses do.

The upstream (``hostile``'s well-behaved ``stream`` mode, its own process) sends a WAV in
four chunks, 0.4 s apart, the way an OpenAI-compatible server streams, and holds the last
until the joiner has its first byte (on a loaded host the render once ended before the
joiner arrived: a HIT); ``voxcache serve`` is a real process in front of it; the client is
the official ``openai`` package. Whether the first byte came before the upstream's last
chunk is read from the upstream itself (how many chunks it had sent when the client held
its first byte), not from a clock.
"""

from __future__ import annotations

import io

import httpx
import openai
import pytest
import soundfile

from tests.packs.nodes import serve

from .hostile import STREAM_CHUNKS
from .servers import HostileServer, hostile_server


def sent(upstream: HostileServer, text: str) -> int:
    """Chunks the upstream has sent so far of its answer to ``text``."""
    [call] = [c for c in upstream.log() if c["text"] == text]
    return int(call["sent"])


@pytest.mark.parametrize("fmt", ["wav", "mp3", "pcm"])
def test_a_miss_and_its_joiner_get_audio_before_the_upstream_has_finished(tmp_path,
                                                                          fmt: str) -> None:
    text = f"stream this take as {fmt}"
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": fmt}
    with hostile_server(tmp_path / "upstream") as upstream, \
            serve(tmp_path / "cache", "--upstream", f"openai={upstream.url}") as gateway:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        with client.audio.speech.with_streaming_response.create(**body) as miss:
            pieces = miss.iter_bytes()
            first = next(pieces)
            upstream_sent_then = sent(upstream, text)
            with httpx.stream("POST", f"{gateway.url}/v1/audio/speech", json=body,
                              timeout=30) as joined:
                joined_pieces = joined.iter_bytes()
                joined_first = next(joined_pieces)
                upstream_sent_at_join = sent(upstream, text)
                upstream.release()  # the last chunk: the render ends
                joined_body = joined_first + b"".join(joined_pieces)
            streamed = first + b"".join(pieces)
            miss_cache = miss.headers["x-cache"]
        hit = httpx.post(f"{gateway.url}/v1/audio/speech", json=body, timeout=30)
        renders = len([c for c in upstream.log() if c["text"] == text])

    assert miss_cache == "MISS" and joined.headers["x-cache"] == "JOINED"
    assert upstream_sent_then < STREAM_CHUNKS, "the first byte waited for the whole render"
    assert upstream_sent_at_join < STREAM_CHUNKS, "the joiner did not follow live"
    assert renders == 1
    assert hit.headers["x-cache"] == "HIT" and "content-length" in hit.headers
    assert joined_body == streamed
    if fmt == "wav":  # the streaming header (sizes unknown, as OpenAI sends), then the samples
        assert streamed[40:44] == b"\xff\xff\xff\xff"
        assert streamed[44:] == hit.content[44:]
    elif fmt == "pcm":
        assert streamed == hit.content
    else:
        audio, rate = soundfile.read(io.BytesIO(streamed))
        whole, whole_rate = soundfile.read(io.BytesIO(hit.content))
        assert rate == whole_rate and abs(len(audio) - len(whole)) < rate * 0.1
