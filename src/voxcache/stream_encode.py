"""Encoding a take while it renders: mp3 and Ogg Opus bytes sent as libsndfile makes them.

Opus pages are only ever appended; an MP3 stream leaves out LAME's info frame (filled in
when the file closes) and sends plain MPEG frames, as internet radio does; FLAC rewrites
STREAMINFO mid-file and so cannot stream (``STREAMS`` lacks it). Should libsndfile ever
rewrite a byte already sent, ``StreamEncodeError`` is raised rather than a corrupt stream
carried on. docs/operating/service.md, "Streaming".
"""

from __future__ import annotations

import io

import numpy as np

from .audio import Audio
from .formats import Format, Resampler

STREAMS = ("mp3", "opus")
"""Encoded formats whose bytes can be sent while the take is still rendering."""
MP3_STREAM = {"bitrate_mode": "CONSTANT", "compression_level": 0.5}
"""libsndfile settings of a streamed MP3: constant bitrate, about 80 kbit/s at 22-24 kHz."""


class StreamEncodeError(RuntimeError):
    """libsndfile went back over bytes already sent (internal: never expected)."""


class _Sink(io.RawIOBase):
    """A seekable file libsndfile writes into; remembers its first write and every write
    that went back over bytes already there."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.position = 0
        self.first_write: int | None = None
        self.rewrites: list[tuple[int, int]] = []

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, chunk: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        size, end = len(chunk), self.position + len(chunk)
        if self.first_write is None:
            self.first_write = size
        if self.position < len(self.data):
            self.rewrites.append((self.position, min(end, len(self.data))))
        if end > len(self.data):
            self.data.extend(bytes(end - len(self.data)))
        self.data[self.position:end] = chunk
        self.position = end
        return size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: len(self.data)}
        self.position = base[whence] + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        return 0  # libsndfile never reads back what it writes for these formats


class StreamEncoder:
    """Chunks of one take in, bytes of one ``fmt`` file out as soon as they are final: the
    concatenation of every ``push`` and the ``close`` decodes as the whole take."""

    def __init__(self, fmt: Format, sample_rate: int, channels: int = 1) -> None:
        import soundfile

        if fmt.name not in STREAMS or fmt.container is None:
            raise ValueError(f"{fmt.name} cannot be encoded as a stream")
        self.fmt = fmt
        rate = fmt.rate_for(sample_rate)
        self._resampler = Resampler(sample_rate, rate, channels)
        self._channels = channels
        self._sink = _Sink()
        settings = MP3_STREAM if fmt.name == "mp3" else {}
        self._file = soundfile.SoundFile(self._sink, "w", rate, channels, format=fmt.container,
                                         subtype=fmt.subtype, **settings)
        self._skip: int | None = None
        """Leading bytes never sent (MP3's info frame), known once libsndfile first writes."""
        self._sent = 0

    def push(self, audio: Audio) -> bytes:
        """Encode one chunk; return the bytes that are now final."""
        self._write(self._resampler.push(audio.pcm))
        return self._ready()

    def close(self) -> bytes:
        """Finish the file; return the rest of it."""
        self._write(self._resampler.flush())
        self._file.close()
        return self._ready()

    def _write(self, pcm: bytes) -> None:
        if pcm:
            frames = np.frombuffer(pcm, dtype="<i2").reshape(-1, self._channels)
            self._file.write(frames.astype(np.float32) / 32768.0)

    def _info_frame(self) -> bool:
        """Is the first write LAME's info frame — one MPEG frame header, then the zeros
        libsndfile fills in when it closes the file?"""
        first = bytes(self._sink.data[:self._sink.first_write])
        return self.fmt.name == "mp3" and len(first) > 4 and first[0] == 0xFF \
            and first[1] & 0xE0 == 0xE0 and not any(first[4:])

    def _ready(self) -> bytes:
        sink = self._sink
        if sink.first_write is None:
            return b""
        if self._skip is None:
            self._skip = self._sent = sink.first_write if self._info_frame() else 0
        for start, end in sink.rewrites:
            if start < self._sent and end > self._skip:
                raise StreamEncodeError(f"libsndfile rewrote {self.fmt.name} bytes already "
                                        "sent")
        sink.rewrites.clear()
        out = bytes(sink.data[self._sent:])
        self._sent = len(sink.data)
        return out
