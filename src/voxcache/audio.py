"""Canonical PCM audio, reference-audio decoding and its content fingerprint.

voxcache stores one canonical form of every take: 16-bit little-endian PCM at the
engine's own sample rate. Delivery formats (mp3, opus, …) are derived from it.

A reference clip is identified by what it *sounds like*, not by its bytes: the
fingerprint hashes the decoded samples and the sample rate, so the same clip
re-saved with other headers or metadata (or renamed) maps to the same key.
Hashing the file bytes first is only a memo in front of that decode.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from dataclasses import dataclass

import blake3
import numpy as np

from .errors import BadReferenceAudio

SAMPLE_WIDTH = 2  # bytes per sample: canonical PCM is int16


@dataclass(frozen=True, slots=True)
class Audio:
    """Mono or interleaved 16-bit PCM with its sample rate."""

    pcm: bytes
    sample_rate: int
    channels: int = 1
    nonfinite: int = 0
    """Samples that were NaN or infinite when an engine's float output was converted
    (``from_float`` writes them as silence; the quality gate refuses such a take)."""

    @property
    def frames(self) -> int:
        """Number of sample frames."""
        return len(self.pcm) // (SAMPLE_WIDTH * self.channels)

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.frames / self.sample_rate if self.sample_rate else 0.0

    def samples(self) -> np.ndarray:
        """Return the samples as an int16 array (a view, no copy)."""
        return np.frombuffer(self.pcm, dtype="<i2")

    @classmethod
    def join(cls, parts: list[Audio]) -> Audio:
        """Concatenate takes of one format (sentence chunks of one render)."""
        if not parts:
            raise ValueError("cannot join zero audio parts")
        first = parts[0]
        return cls(b"".join(p.pcm for p in parts), first.sample_rate, first.channels,
                   sum(p.nonfinite for p in parts))

    @classmethod
    def from_float(cls, samples: np.ndarray, sample_rate: int) -> Audio:
        """Convert float samples in [-1, 1] to canonical int16 PCM (NaN and infinities
        become silence, counted in ``nonfinite``)."""
        values = np.asarray(samples, dtype=np.float32)
        finite = np.isfinite(values)
        bad = int(values.size - np.count_nonzero(finite))
        if bad:
            values = np.where(finite, values, 0.0)
        clipped = np.clip(values * 32767.0, -32767.0, 32767.0)
        return cls(clipped.astype("<i2").tobytes(), sample_rate, 1, bad)


@dataclass(frozen=True, slots=True)
class Reference:
    """Decoded reference audio and its content fingerprint."""

    fingerprint: str
    sample_rate: int
    channels: int
    duration: float


class _FingerprintMemo:
    """Bounded memo: file-bytes hash → content fingerprint (skips repeat decodes)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._items: OrderedDict[str, Reference] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, file_hash: str) -> Reference | None:
        with self._lock:
            ref = self._items.get(file_hash)
            if ref is not None:
                self._items.move_to_end(file_hash)
            return ref

    def put(self, file_hash: str, ref: Reference) -> None:
        with self._lock:
            self._items[file_hash] = ref
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


_memo = _FingerprintMemo()


def decode_reference(data: bytes, max_seconds: float = 60.0) -> tuple[np.ndarray, int]:
    """Decode an uploaded clip to float32 frames, refusing empty or undecodable input."""
    import soundfile

    if not data:
        raise BadReferenceAudio("reference audio is empty: send a WAV, FLAC or OGG clip")
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise BadReferenceAudio(
            f"reference audio could not be decoded ({decode_failure_reason(exc)}); "
            "send WAV, FLAC or OGG"
        ) from None
    if samples.shape[0] == 0:
        raise BadReferenceAudio("reference audio holds no samples")
    if samples.shape[0] / rate > max_seconds:
        raise BadReferenceAudio(
            f"reference audio is {samples.shape[0] / rate:.1f} s long; the limit is "
            f"{max_seconds:.0f} s — trim the clip"
        )
    return samples, int(rate)


def decode_failure_reason(exc: Exception) -> str:
    """libsndfile's own reason, without soundfile's prefix: that prefix names the Python
    object it read from (``Error opening <_io.BytesIO object at 0x…>``), which tells the
    caller nothing and shows them the server's memory addresses."""
    reason = getattr(exc, "error_string", None)
    if isinstance(reason, str) and reason.strip():
        return reason.strip().rstrip(".")
    return "the data is damaged or truncated"


def fingerprint_reference(data: bytes, max_seconds: float = 60.0) -> Reference:
    """Return the content fingerprint of a reference clip (memoised by file hash)."""
    file_hash = blake3.blake3(data).hexdigest()
    cached = _memo.get(file_hash)
    if cached is not None:
        return cached
    samples, rate = decode_reference(data, max_seconds)
    hasher = blake3.blake3(f"pcm-f32le:{rate}:{samples.shape[1]}:".encode())
    hasher.update(np.ascontiguousarray(samples, dtype="<f4").tobytes())
    ref = Reference(
        fingerprint=hasher.hexdigest(),
        sample_rate=rate,
        channels=int(samples.shape[1]),
        duration=samples.shape[0] / rate,
    )
    _memo.put(file_hash, ref)
    return ref
