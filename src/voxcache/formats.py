"""Delivery formats, derived from the one canonical PCM take.

The cache stores 16-bit PCM inside a WAV once; every delivery format is an
encoding of it, so asking for mp3 after wav is a hit, not a second render.
Encoders are whatever libsndfile on this machine can write (checked at import,
not assumed): wav and pcm always, flac, mp3 and Ogg Opus when the library has
them. AAC has no encoder in libsndfile, so it is refused with the list of what
works. Opus only takes 8/12/16/24/48 kHz, so other rates are resampled for it.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np

from .audio import Audio
from .errors import InvalidParameter

OPUS_RATES = (48000, 24000, 16000, 12000, 8000)


@dataclass(frozen=True, slots=True)
class Format:
    """How one delivery format is written and labelled."""

    name: str
    media_type: str
    container: str | None = None
    """libsndfile container for encoded formats; None for wav/pcm (written directly)."""
    subtype: str | None = None


_CANDIDATES = (
    Format("wav", "audio/wav"),
    Format("pcm", "audio/pcm"),
    Format("flac", "audio/flac", "FLAC", "PCM_16"),
    Format("mp3", "audio/mpeg", "MP3", "MPEG_LAYER_III"),
    Format("opus", "audio/ogg; codecs=opus", "OGG", "OPUS"),
    Format("aac", "audio/aac", "AAC", None),
)


def _writable(fmt: Format) -> bool:
    if fmt.container is None:
        return True
    import soundfile

    formats = soundfile.available_formats()
    return fmt.container in formats and fmt.subtype in soundfile.available_subtypes(
        fmt.container)


FORMATS = {f.name: f for f in _CANDIDATES if _writable(f)}
"""The formats this machine can deliver, by name."""


def lookup(name: str) -> Format:
    """Return a supported format or refuse with the list of the supported ones."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise InvalidParameter(
            f"response_format {name!r} is not available here; supported: "
            f"{', '.join(FORMATS)}")
    return fmt


def media_type(fmt: Format, sample_rate: int) -> str:
    """The Content-Type; raw PCM carries its rate, since nothing else does."""
    if fmt.name == "pcm":
        return f"audio/pcm;rate={sample_rate};encoding=s16le;channels=1"
    return fmt.media_type


def encode(audio: Audio, fmt: Format) -> bytes:
    """Encode a whole take."""
    if fmt.name == "pcm":
        return audio.pcm
    if fmt.name == "wav":
        return wav_header(audio.sample_rate, audio.channels, len(audio.pcm)) + audio.pcm
    import soundfile

    samples = audio.samples().reshape(-1, audio.channels).astype(np.float32) / 32768.0
    rate = audio.sample_rate
    if fmt.name == "opus" and rate not in OPUS_RATES:
        samples, rate = _resample(samples, rate, _opus_rate(rate)), _opus_rate(rate)
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=fmt.container, subtype=fmt.subtype)
    return out.getvalue()


def wav_header(sample_rate: int, channels: int, data_bytes: int | None) -> bytes:
    """A 44-byte PCM WAV header; ``None`` length (streaming) writes the 0xFFFFFFFF marker."""
    size = 0xFFFFFFFF if data_bytes is None else data_bytes
    riff = 0xFFFFFFFF if data_bytes is None else 36 + data_bytes
    block = channels * 2
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block, block, 16)
        + b"data" + struct.pack("<I", size))


def _opus_rate(rate: int) -> int:
    return next((r for r in reversed(OPUS_RATES) if r >= rate), OPUS_RATES[0])


def _resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Linear resampling: good enough for speech going into a lossy codec."""
    frames = samples.shape[0]
    count = max(1, round(frames * target / rate))
    src = np.arange(frames) / rate
    dst = np.arange(count) / target
    return np.stack([np.interp(dst, src, samples[:, c]) for c in range(samples.shape[1])],
                    axis=1).astype(np.float32)
