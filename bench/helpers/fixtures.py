"""Building voxcache objects of a chosen size without running a real engine."""

from __future__ import annotations

import os
from pathlib import Path

from voxcache.audio import Audio
from voxcache.entry import Entry, audio_entry

HOT_PHRASES = Path(__file__).resolve().parents[2] / "examples" / "hot_phrases.json"
"""Phrases real announcement and customer-service deployments repeat (a copy of the
project's shared data, kept in the repository so a fresh clone has it)."""
SAMPLE_RATE = 22050
"""Piper's en_US-joe-medium rate: 44.1 KB of PCM per second of speech."""


def pcm(nbytes: int, seed: bytes = b"") -> bytes:
    """Noise-like PCM of (about) ``nbytes`` — an even count, as 16-bit samples need."""
    nbytes -= nbytes % 2
    return (seed + os.urandom(nbytes))[:nbytes] if seed else os.urandom(nbytes)


def entry_of_size(key: str, nbytes: int, meta: dict[str, str] | None = None) -> Entry:
    """A stored audio entry whose payload is ``nbytes`` of PCM."""
    return audio_entry(key, Audio(pcm(nbytes), SAMPLE_RATE), meta=meta or {"voice": "bench"})
