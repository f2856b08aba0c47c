"""Turn what an upstream sends back into canonical int16 PCM.

Upstreams answer in three shapes: a complete WAV file (Piper, OpenAI
``response_format=wav``, GPT-SoVITS non-streaming), a *streamed* WAV whose
header was written before the length was known (GPT-SoVITS streaming: a header
claiming zero frames, then raw PCM), and headerless PCM at a rate only the
operator knows (CosyVoice, OpenAI ``pcm``). The WAV reader therefore trusts
the header for the format but not for the length, and anything that is not
16-bit PCM goes through libsndfile and is converted.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from ..audio import SAMPLE_WIDTH, Audio
from ..errors import UpstreamError

_PCM = 1
_EXTENSIBLE = 0xFFFE
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)


def decode_pcm(body: bytes, sample_rate: int, channels: int = 1) -> Audio:
    """Wrap headerless little-endian int16 PCM, refusing empty or torn bodies."""
    if not body:
        raise UpstreamError("upstream answered 200 with no audio")
    usable = len(body) - len(body) % (SAMPLE_WIDTH * channels)
    return Audio(body[:usable], sample_rate, channels)


def decode_wav(body: bytes) -> Audio:
    """Decode a WAV answer (complete or streamed) to canonical PCM."""
    if body[:4] != b"RIFF" or body[8:12] != b"WAVE":
        raise UpstreamError(f"upstream answered 200 but not with a WAV file: {body[:60]!r}")
    fmt, data = _chunks(body)
    if fmt is None or data is None:
        raise UpstreamError("upstream WAV has no fmt or data chunk")
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == _EXTENSIBLE and len(fmt) >= 26:
        tag = struct.unpack("<H", fmt[24:26])[0]
    if tag == _PCM and bits == 16:
        return decode_pcm(data, rate, channels)
    return _via_soundfile(body)


def _chunks(body: bytes) -> tuple[bytes | None, bytes | None]:
    """Return the fmt chunk and the audio data, trusting the data length only if plausible."""
    fmt = None
    offset = 12
    while offset + 8 <= len(body):
        name = body[offset:offset + 4]
        size = struct.unpack("<I", body[offset + 4:offset + 8])[0]
        start = offset + 8
        if name == b"data":
            end = len(body) if size in _UNKNOWN_SIZES else min(len(body), start + size)
            return fmt, body[start:end]
        if name == b"fmt ":
            fmt = body[start:start + size]
        offset = start + size + (size & 1)
    return fmt, None


def _via_soundfile(body: bytes) -> Audio:
    import soundfile

    try:
        samples, rate = soundfile.read(io.BytesIO(body), dtype="int16", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as exc:
        raise UpstreamError(f"upstream audio could not be decoded: {exc}") from None
    if samples.shape[0] == 0:
        raise UpstreamError("upstream answered 200 with no audio")
    pcm = np.ascontiguousarray(samples, dtype="<i2").tobytes()
    return Audio(pcm, int(rate), int(samples.shape[1]))
