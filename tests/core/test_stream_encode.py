"""Encoding a take while it renders (``stream_encode``) and resampling it chunk by chunk."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from voxcache.audio import Audio
from voxcache.formats import FORMATS, Resampler, encode, resample
from voxcache.stream_encode import StreamEncodeError, StreamEncoder


def speechlike(rate: int, seconds: float = 3.0) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 220 * t * (1 + 0.3 * np.sin(t * 5))) * (1 + np.sin(t * 7))
    return np.clip(wave * 16000, -32767, 32767).astype("<i2").tobytes()


def streamed(fmt: str, pcm: bytes, rate: int, chunk: int = 7001) -> list[bytes]:
    encoder = StreamEncoder(FORMATS[fmt], rate)
    parts = [encoder.push(Audio(pcm[i:i + 2 * chunk], rate)) for i in range(0, len(pcm),
                                                                             2 * chunk)]
    return [*parts, encoder.close()]


@pytest.mark.parametrize("rate", [16000, 22050])
@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_the_pieces_decode_as_the_whole_take(fmt: str, rate: int) -> None:
    pcm = speechlike(rate)
    parts = streamed(fmt, pcm, rate)
    assert sum(1 for part in parts if part) > 2  # bytes go out before the take ends
    samples, decoded_rate = soundfile.read(io.BytesIO(b"".join(parts)), dtype="float32")
    assert abs(len(samples) / decoded_rate - 3.0) < 0.1  # the codec's delay at most
    if fmt == "opus":  # Ogg is only appended: the stream is the file (but its serial number)
        whole, _ = soundfile.read(io.BytesIO(encode(Audio(pcm, rate), FORMATS["opus"])),
                                  dtype="float32")
        assert np.array_equal(samples, whole)


def test_a_rewrite_of_bytes_already_sent_is_refused_not_streamed() -> None:
    encoder = StreamEncoder(FORMATS["opus"], 16000)
    pcm = speechlike(16000)
    sent = b"".join(encoder.push(Audio(pcm[i:i + 32000], 16000)) for i in range(0, 96000,
                                                                              32000))
    assert sent
    sink = encoder._sink  # what libsndfile would do if it went back over sent bytes
    sink.seek(len(sent) - 10)
    sink.write(b"\0" * 4)
    with pytest.raises(StreamEncodeError):
        encoder.push(Audio(pcm[96000:], 16000))


def test_formats_that_rewrite_their_start_do_not_stream() -> None:
    with pytest.raises(ValueError, match="flac"):
        StreamEncoder(FORMATS["flac"], 16000)


@pytest.mark.parametrize("chunk", [1, 441, 4410, 100_000])
def test_chunked_resampling_is_the_whole_take_resampled(chunk: int) -> None:
    pcm = speechlike(22050, 1.0)
    resampler = Resampler(22050, 24000)
    out = b"".join(resampler.push(pcm[i:i + 2 * chunk]) for i in range(0, len(pcm), 2 * chunk))
    whole = resample(Audio(pcm, 22050), 24000)
    assert out + resampler.flush() == whole.pcm
    assert abs(len(whole.pcm) // 2 - 24000) <= 1
