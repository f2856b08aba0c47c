"""Turn what an upstream sends back into canonical int16 PCM, as it arrives.

Three shapes: a complete WAV, a streamed WAV whose header claims zero frames (GPT-SoVITS
streaming), and headerless PCM at a rate the operator names (CosyVoice, OpenAI ``pcm``).
The header is trusted for the format, never for an unknown length; anything not 16-bit PCM
goes through libsndfile. Incremental, in whole frames of at least ``MIN_CHUNK_BYTES``, so
a miss streams while the upstream speaks.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Iterator

import numpy as np

from ..audio import SAMPLE_WIDTH, Audio, decode_failure_reason
from ..errors import UpstreamError

MIN_CHUNK_BYTES = 8192
_PCM = 1
_EXTENSIBLE = 0xFFFE
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)


def pcm_stream(chunks: Iterable[bytes], sample_rate: int, channels: int = 1) -> Iterator[Audio]:
    """Yield headerless little-endian int16 PCM as it arrives, refusing an empty answer."""
    frame = SAMPLE_WIDTH * channels
    pending = bytearray()
    sent = 0
    for chunk in chunks:
        pending += chunk
        if len(pending) >= MIN_CHUNK_BYTES:
            usable = len(pending) - len(pending) % frame
            yield Audio(bytes(pending[:usable]), sample_rate, channels)
            sent += usable
            del pending[:usable]
    usable = len(pending) - len(pending) % frame
    if usable:
        yield Audio(bytes(pending[:usable]), sample_rate, channels)
    elif not sent:
        raise UpstreamError("upstream answered 200 with no audio")


def wav_stream(chunks: Iterable[bytes]) -> Iterator[Audio]:
    """Yield a WAV answer's samples as they arrive (complete or streamed WAV)."""
    rest = iter(chunks)
    head = bytearray()
    header = None
    for chunk in rest:
        head += chunk
        header = _header(bytes(head))
        if header is not None:
            break
    if header is None:
        raise UpstreamError(f"upstream WAV ended before its audio: {bytes(head[:60])!r}")
    tag, channels, rate, bits, offset, size = header
    if tag != _PCM or bits != 16:
        yield _via_soundfile(bytes(head) + b"".join(rest))
        return
    data = _limited(_prepend(bytes(head[offset:]), rest), size)
    yield from pcm_stream(data, rate, channels)


def _header(head: bytes) -> tuple[int, int, int, int, int, int] | None:
    """(format tag, channels, rate, bits, data offset, data size), or None if incomplete."""
    if len(head) >= 12 and (head[:4] != b"RIFF" or head[8:12] != b"WAVE"):
        raise UpstreamError(f"upstream answered 200 but not with a WAV file: {head[:60]!r}")
    fmt = None
    offset = 12
    while offset + 8 <= len(head):
        name = head[offset:offset + 4]
        size = struct.unpack("<I", head[offset + 4:offset + 8])[0]
        start = offset + 8
        if name == b"data":
            if fmt is None:
                raise UpstreamError("upstream WAV has no fmt chunk before its data")
            return (*fmt, start, size)
        if name == b"fmt ":
            if start + size > len(head):
                return None
            fmt = _format(head[start:start + size])
        offset = start + size + (size & 1)
    return None


def _format(chunk: bytes) -> tuple[int, int, int, int]:
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", chunk[:16])
    if tag == _EXTENSIBLE and len(chunk) >= 26:
        tag = struct.unpack("<H", chunk[24:26])[0]
    return tag, channels, rate, bits


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _limited(chunks: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The data chunk's bytes: all of them when the header could not know the length."""
    if size in _UNKNOWN_SIZES:
        yield from chunks
        return
    left = size
    for chunk in chunks:
        if left <= 0:
            return
        yield chunk[:left]
        left -= len(chunk)


def _via_soundfile(body: bytes) -> Audio:
    import soundfile

    try:
        # read as float: libsndfile does not scale float files when asked for integers
        samples, rate = soundfile.read(io.BytesIO(body), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as exc:
        raise UpstreamError(f"upstream audio could not be decoded: {decode_failure_reason(exc)}"
                            ) from None
    if samples.shape[0] == 0:
        raise UpstreamError("upstream answered 200 with no audio")
    scaled = np.clip(np.round(samples * 32768.0), -32768, 32767)
    pcm = np.ascontiguousarray(scaled, dtype="<i2").tobytes()
    return Audio(pcm, int(rate), int(samples.shape[1]))
