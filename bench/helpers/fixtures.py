"""Building voxcache objects of a chosen size without running a real engine."""

from __future__ import annotations

import os

from voxcache.audio import Audio
from voxcache.entry import Entry, audio_entry

SAMPLE_RATE = 22050
"""Piper's en_US-joe-medium rate: 44.1 KB of PCM per second of speech."""


def pcm(nbytes: int, seed: bytes = b"") -> bytes:
    """Noise-like PCM of (about) ``nbytes`` — an even count, as 16-bit samples need."""
    nbytes -= nbytes % 2
    return (seed + os.urandom(nbytes))[:nbytes] if seed else os.urandom(nbytes)


def entry_of_size(key: str, nbytes: int, meta: dict[str, str] | None = None) -> Entry:
    """A stored audio entry whose payload is ``nbytes`` of PCM."""
    return audio_entry(key, Audio(pcm(nbytes), SAMPLE_RATE), meta=meta or {"voice": "bench"})
