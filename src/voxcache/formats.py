"""Delivery formats, derived from the one canonical PCM take.

Every delivery format is an encoding of the stored 16-bit PCM, so mp3 after wav is a hit,
not a render. Encoders are what this machine has, checked at import (libsndfile: flac, mp3,
Ogg Opus; ffmpeg for AAC); a missing one is refused with the list of what works. A format
may carry a delivery rate (``Format.at``: OpenAI's 24 kHz ``pcm``), resampled by libsoxr
through one stateful ``Resampler``, so chunk by chunk equals whole. docs/operating/service.md.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import struct
import subprocess
from dataclasses import dataclass

import numpy as np
import soxr

from .audio import Audio
from .errors import InvalidParameter, UnsupportedFeature

OPUS_RATES = (48000, 24000, 16000, 12000, 8000)
WAV_HEADER_BYTES = 44
"""A plain PCM WAV header (``wav_header``): what delivered WAVs start with."""
AAC_BITRATE = "128k"
"""AAC-LC at 128 kb/s: transparent for speech, mono or stereo."""
NO_FFMPEG = "aac is encoded by ffmpeg, which this machine lacks (apt-get install ffmpeg)"


@dataclass(frozen=True, slots=True)
class Format:
    """How one delivery format is written and labelled."""

    name: str
    media_type: str
    container: str | None = None
    """libsndfile container for encoded formats; None for wav/pcm (written directly)."""
    subtype: str | None = None
    sample_rate: int | None = None
    """Delivery rate; None delivers the take at its own rate (see ``at``)."""

    def at(self, sample_rate: int) -> Format:
        """This format delivered at ``sample_rate`` whatever rate the take has."""
        return dataclasses.replace(self, sample_rate=sample_rate)

    def rate_for(self, take_rate: int) -> int:
        """The rate a take rendered at ``take_rate`` is delivered at in this format."""
        if self.sample_rate is not None:
            return self.sample_rate
        return _opus_rate(take_rate) if self.name == "opus" else take_rate


_CANDIDATES = (
    Format("wav", "audio/wav"),
    Format("pcm", "audio/pcm"),
    Format("flac", "audio/flac", "FLAC", "PCM_16"),
    Format("mp3", "audio/mpeg", "MP3", "MPEG_LAYER_III"),
    Format("opus", "audio/ogg; codecs=opus", "OGG", "OPUS"),
    Format("aac", "audio/aac", "ADTS", None),  # through ffmpeg (aac)
)


def _writable(fmt: Format) -> bool:
    if fmt.name == "aac":
        return shutil.which("ffmpeg") is not None
    if fmt.container is None:
        return True
    import soundfile

    formats = soundfile.available_formats()
    return fmt.container in formats and fmt.subtype in soundfile.available_subtypes(
        fmt.container)


FORMATS = {f.name: f for f in _CANDIDATES if _writable(f)}
"""The formats this machine can deliver, by name."""
UNAVAILABLE = {f.name: NO_FFMPEG if f.name == "aac" else
               f"this machine's libsndfile cannot write {f.name}"
               for f in _CANDIDATES if f.name not in FORMATS}
"""Formats voxcache knows but this machine cannot deliver, and why."""


def lookup(name: str) -> Format:
    """Return a supported format, or refuse saying why it is not (a format this machine
    lacks an encoder for, or one voxcache does not know) and what is supported."""
    fmt = FORMATS.get(name)
    if fmt is None:
        supported = ", ".join(FORMATS)
        if name in UNAVAILABLE:
            raise UnsupportedFeature(f"response_format {name!r} is not available here: "
                                     f"{UNAVAILABLE[name]}; supported: {supported}")
        raise InvalidParameter(f"response_format {name!r} is not available here; "
                               f"supported: {supported}")
    return fmt


def media_type(fmt: Format, sample_rate: int) -> str:
    """The Content-Type of a take rendered at ``sample_rate``; raw PCM carries its rate,
    since nothing else does."""
    if fmt.name == "pcm":
        return f"audio/pcm;rate={fmt.rate_for(sample_rate)};encoding=s16le;channels=1"
    return fmt.media_type


def encode(audio: Audio, fmt: Format) -> bytes:
    """Encode a whole take (resampled first when the format has its own rate)."""
    audio = resample(audio, fmt.rate_for(audio.sample_rate))
    if fmt.name == "pcm":
        return audio.pcm
    if fmt.name == "wav":
        return wav_header(audio.sample_rate, audio.channels, len(audio.pcm)) + audio.pcm
    if fmt.name == "aac":
        return aac(audio)
    import soundfile

    samples = audio.samples().reshape(-1, audio.channels).astype(np.float32) / 32768.0
    out = io.BytesIO()
    soundfile.write(out, samples, audio.sample_rate, format=fmt.container, subtype=fmt.subtype)
    return out.getvalue()


def aac(audio: Audio, bitrate: str = AAC_BITRATE) -> bytes:
    """AAC-LC in ADTS frames, by ffmpeg's native encoder (PCM in on stdin, ADTS out)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:  # removed since this process started
        raise UnsupportedFeature(NO_FFMPEG)
    command = [ffmpeg, "-nostdin", "-loglevel", "error", "-f", "s16le",
               "-ar", str(audio.sample_rate), "-ac", str(audio.channels), "-i", "pipe:0",
               "-c:a", "aac", "-b:a", bitrate, "-f", "adts", "pipe:1"]
    try:
        done = subprocess.run(command, input=audio.pcm, capture_output=True, timeout=120,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnsupportedFeature(f"aac encoding failed: {exc}") from None
    if done.returncode != 0 or not done.stdout:
        raise UnsupportedFeature("aac encoding failed: "
                                 f"{done.stderr.decode(errors='replace')[-200:]}")
    return done.stdout


class Resampler:
    """Resample 16-bit PCM chunk by chunk: the concatenation of ``push``es and the final
    ``flush`` is, sample for sample, ``resample`` of the whole take (libsoxr keeps the
    filter state between chunks, so no click at a join). Equal rates pass through."""

    def __init__(self, from_rate: int, to_rate: int, channels: int = 1) -> None:
        self.channels = channels
        self._stream = None if from_rate == to_rate else soxr.ResampleStream(
            from_rate, to_rate, channels, dtype="float32", quality="HQ")

    def push(self, pcm: bytes | memoryview) -> bytes:
        """The output samples this chunk completes (fewer than a whole chunk at first:
        the filter's delay is paid back by ``flush``)."""
        return self._run(pcm, last=False)

    def flush(self) -> bytes:
        """The samples still held in the filter once the take has ended."""
        return self._run(b"", last=True)

    def _run(self, pcm: bytes | memoryview, last: bool) -> bytes:
        if self._stream is None:
            return bytes(pcm)
        frames = np.frombuffer(pcm, dtype="<i2").reshape(-1, self.channels)
        out = self._stream.resample_chunk(frames.astype(np.float32) / 32768.0, last=last)
        return np.clip(np.rint(out * 32768.0), -32768, 32767).astype("<i2").tobytes()


def resample(audio: Audio, sample_rate: int) -> Audio:
    """The whole take at ``sample_rate`` (itself when it already is)."""
    if audio.sample_rate == sample_rate:
        return audio
    stream = Resampler(audio.sample_rate, sample_rate, audio.channels)
    return Audio(stream.push(audio.pcm) + stream.flush(), sample_rate, audio.channels)


def wav_header(sample_rate: int, channels: int, data_bytes: int | None) -> bytes:
    """A 44-byte PCM WAV header; ``None`` length (streaming) writes the 0xFFFFFFFF marker."""
    size = 0xFFFFFFFF if data_bytes is None else data_bytes
    riff = 0xFFFFFFFF if data_bytes is None else 36 + data_bytes
    block = channels * 2
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block, block, 16)
        + b"data" + struct.pack("<I", size))


def _opus_rate(rate: int) -> int:
    """The lowest rate Opus takes that loses nothing of a take at ``rate``."""
    return next((r for r in reversed(OPUS_RATES) if r >= rate), OPUS_RATES[0])
