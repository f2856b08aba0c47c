"""Encoded variants: mp3/opus/flac deliveries cached next to the one canonical PCM take.

The PCM take is stored once; a delivery format is a pure function of it, so
an encoding is keyed by ``derived_key(audio_key, "encoded", format=…,
bitrate=…)`` and stored as an ``encoded`` entry (memory and disk). Encodings
are the first victims of disk eviction (``tiers.lifecycle.VICTIMS``):
losing one costs an encode, losing the PCM costs a render.

The encoder is ``voxcache.formats`` (libsndfile: whatever this machine can
write); this module only adds the caching around it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .entry import Entry, blob_entry
from .formats import Format, encode, lookup
from .key import derived_key

if TYPE_CHECKING:
    from .cache import Cache
    from .cached import CachedEngine, Result

PASSTHROUGH = ("wav", "pcm")
"""Formats served straight from the stored take (no encoding, nothing extra stored)."""


def encoded_key(audio_key: str, fmt: str, bitrate: int | None = None) -> str:
    """Where the ``fmt`` encoding of the take at ``audio_key`` is stored."""
    return derived_key(audio_key, "encoded", format=fmt, bitrate=bitrate)


def encoded(target: CachedEngine | Cache, result: Result | Entry, fmt: str | Format, *,
            bitrate: int | None = None) -> bytes:
    """Return ``result``'s take in ``fmt`` (a name or a ``Format``), encoding it once.

    ``target`` is the cache (or a cached engine); ``result`` a ``Result`` or a stored
    audio ``Entry``. wav and pcm are the stored bytes themselves.
    """
    cache: Cache = getattr(target, "cache", target)
    entry: Entry = getattr(result, "entry", result)
    fmt = lookup(fmt) if isinstance(fmt, str) else fmt
    if fmt.name == "wav":
        return entry.blob
    if fmt.name == "pcm":
        return bytes(entry.payload)
    key = encoded_key(entry.header.key, fmt.name, bitrate)
    found = cache.get(key, "encoded")
    if found is not None:
        cache.count("encoded_hits")
        return bytes(found[0].payload)
    data = encode(entry.audio(), fmt)
    stored = blob_entry(key, "encoded", data, fmt.media_type, meta={
        "parent": entry.header.key, "format": fmt.name, "bitrate": bitrate,
        **{k: entry.header.meta.get(k) for k in ("tenant", "engine", "model", "voice", "text")}},
        ttl=None if entry.header.expires is None else max(
            1.0, entry.header.expires - time.time()))  # never outlives its PCM
    cache.put(stored, tenant=str(entry.header.meta.get("tenant", "")))
    cache.count("encoded_misses")
    return data
