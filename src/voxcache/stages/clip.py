"""A reference clip as a stage sees it: its fingerprint now, its samples only on a miss.

A hit needs only the fingerprint, and that is memoised by the file bytes' hash
(``audio.fingerprint_reference``), so a known clip costs one BLAKE3 pass over its
bytes and no decode. The samples are decoded when an extractor actually runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..audio import decode_reference, fingerprint_reference

DEFAULT_MAX_SECONDS = 60.0


@dataclass(slots=True)
class Clip:
    """Reference audio (the file's bytes) and what voxcache knows of it."""

    data: bytes
    fingerprint: str
    sample_rate: int
    channels: int
    duration: float
    max_seconds: float = DEFAULT_MAX_SECONDS
    _samples: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def of(cls, data: bytes, max_seconds: float = DEFAULT_MAX_SECONDS) -> Clip:
        """Fingerprint a clip (refuses empty, undecodable or too long audio with
        ``BadReferenceAudio``)."""
        ref = fingerprint_reference(data, max_seconds)
        return cls(data, ref.fingerprint, ref.sample_rate, ref.channels, ref.duration,
                   max_seconds)

    def samples(self) -> np.ndarray:
        """The decoded samples, float32, shape (frames, channels); decoded once."""
        if self._samples is None:
            self._samples, _ = decode_reference(self.data, self.max_seconds)
        return self._samples

    def mono(self) -> np.ndarray:
        """The samples mixed down to one channel, float32."""
        samples = self.samples()
        if samples.shape[1] == 1:
            return samples[:, 0]
        return samples.mean(axis=1, dtype=np.float32)
