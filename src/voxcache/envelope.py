"""What every stored object is once verified: its header and its exact bytes.

The formats that write and verify stored objects (``entry`` for audio and
blobs, ``tensors`` for safetensors) share these types; they live apart from
both so that neither format module imports the other's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .audio import Audio


class CorruptEntry(Exception):
    """A stored object failed verification (internal: tiers turn it into a miss)."""


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """What the envelope records about its payload."""

    kind: str
    key: str
    created: float
    expires: float | None
    content_type: str
    length: int
    sample_rate: int = 0
    channels: int = 0
    sample_format: str = ""
    duration: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    """Descriptive fields (engine, voice, text preview) used to rebuild the index."""

    def expired(self, now: float) -> bool:
        """True once the entry's TTL has run out."""
        return self.expires is not None and now >= self.expires

    def fields(self) -> dict[str, Any]:
        """The header as the dict its JSON is made from. Shallow, unlike
        ``dataclasses.asdict``, whose deep copy of ``meta`` was most of sealing a take."""
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Entry:
    """A verified stored object: its header and the exact bytes that were stored."""

    header: EntryHeader
    blob: bytes
    """The whole stored file (for audio, a playable WAV)."""
    payload_offset: int

    @property
    def payload(self) -> memoryview:
        """The payload without copying it."""
        start = self.payload_offset
        return memoryview(self.blob)[start : start + self.header.length]

    @property
    def size(self) -> int:
        """Bytes this entry occupies in storage."""
        return len(self.blob)

    def audio(self) -> Audio:
        """Return the payload as canonical PCM audio."""
        return Audio(bytes(self.payload), self.header.sample_rate, self.header.channels)
