"""Decoding upstream answers: whole and streamed WAVs, raw PCM, and what is refused."""

from __future__ import annotations

import asyncio
import io
import struct
import threading
import wave

import numpy as np
import pytest
import soundfile
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from voxcache.audio import Audio
from voxcache.errors import UpstreamError
from voxcache.request import SynthesisRequest, resolve
from voxcache.upstream import load_upstream
from voxcache.upstream.decode import MIN_CHUNK_BYTES, pcm_stream, wav_stream

from .servers import serve_app

SAMPLES = (np.arange(20000) % 300 * 100 - 15000).astype("<i2")


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def whole(chunks) -> Audio:
    return Audio.join(list(wav_stream(chunks)))


def test_complete_wav_honours_the_data_length() -> None:
    buffer = io.BytesIO()
    soundfile.write(buffer, SAMPLES, 22050, format="WAV")
    trailing = b"LIST" + struct.pack("<I", 4) + b"abcd"  # metadata after the samples
    audio = whole(pieces(buffer.getvalue() + trailing, 7))
    assert (audio.pcm, audio.sample_rate, audio.channels) == (SAMPLES.tobytes(), 22050, 1)


def test_streamed_wav_with_unknown_length_takes_everything() -> None:
    header = io.BytesIO()
    with wave.open(header, "wb") as out:  # GPT-SoVITS streaming: a header claiming 0 frames
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(32000)
    chunks = pieces(header.getvalue(), 5) + pieces(SAMPLES.tobytes(), 999)
    parts = list(wav_stream(chunks))
    assert Audio.join(parts).pcm == SAMPLES.tobytes() and parts[0].sample_rate == 32000
    assert len(parts) > 1 and all(len(p.pcm) >= MIN_CHUNK_BYTES for p in parts[:-1])


def test_float_wav_is_converted() -> None:
    buffer = io.BytesIO()
    soundfile.write(buffer, SAMPLES / 32768.0, 24000, format="WAV", subtype="FLOAT")
    audio = whole([buffer.getvalue()])
    assert audio.sample_rate == 24000
    assert np.max(np.abs(audio.samples().astype(int) - SAMPLES)) <= 1


@pytest.mark.parametrize("body, message", [
    (b"<html>500</html>", "not with a WAV"),
    (b"RIFF\0\0\0\0WAVEfmt ", "ended before its audio"),
    (b"", "ended before its audio"),
])
def test_not_audio_is_an_upstream_error(body: bytes, message: str) -> None:
    with pytest.raises(UpstreamError, match=message):
        whole([body])


def test_raw_pcm_keeps_whole_frames_and_refuses_nothing() -> None:
    audio = Audio.join(list(pcm_stream([SAMPLES.tobytes()[:101]], 24000)))
    assert audio.pcm == SAMPLES.tobytes()[:100]
    with pytest.raises(UpstreamError, match="no audio"):
        list(pcm_stream([b""], 24000))


def test_a_miss_streams_while_the_upstream_is_still_speaking() -> None:
    """The first samples come out of the engine before the upstream has sent the rest."""
    release = threading.Event()
    app = FastAPI()

    @app.post("/inference_sft")
    async def sft() -> StreamingResponse:
        async def body():
            yield SAMPLES.tobytes()  # first segment
            await asyncio.to_thread(release.wait, 30)
            yield SAMPLES.tobytes()  # second segment, only once the test has the first

        return StreamingResponse(body())

    with serve_app(app) as url:
        engine = load_upstream(f"cosyvoice={url}")
        chunks = engine.render(resolve(SynthesisRequest("Two segments."), engine))
        first = next(chunks)
        assert not release.is_set() and len(first.pcm) > 0
        release.set()
        rest = list(chunks)
    assert Audio.join([first, *rest]).pcm == SAMPLES.tobytes() * 2


def test_an_answer_torn_mid_body_fails_the_render_and_stores_nothing(cache) -> None:
    from voxcache import CachedEngine

    app = FastAPI()

    @app.post("/inference_sft")
    async def sft() -> StreamingResponse:
        async def body():
            yield SAMPLES.tobytes()
            raise RuntimeError("the upstream died mid-take")

        return StreamingResponse(body())

    with serve_app(app) as url:
        cached = CachedEngine(load_upstream(f"cosyvoice={url}"), cache)
        request = SynthesisRequest("Torn.")
        with pytest.raises(UpstreamError, match="failed"):
            cached.synthesize(request)
        _, key = cached.resolve_and_key(request)
    assert cache.get(key) is None
