"""Encoded variants: mp3/opus/flac deliveries cached next to the one canonical PCM take.

The PCM take is stored once; a delivery format is a pure function of it, so
an encoding is keyed by ``derived_key(audio_key, "encoded", format=…,
bitrate=…)`` and stored as an ``encoded`` entry (memory and disk). Encodings
are the first victims of disk eviction (``tiers.lifecycle.ENCODED_FIRST``):
losing one costs an encode, losing the PCM costs a render.

The encoder itself is the service's (``voxcache.service.formats``: libsndfile,
whatever this machine can write); this module only adds the caching around it,
so there is one encoder in the code base. It is passed in, or imported lazily.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .entry import Entry, blob_entry
from .key import derived_key

if TYPE_CHECKING:
    from .audio import Audio
    from .cache import Cache
    from .cached import CachedEngine, Result

PASSTHROUGH = ("wav", "pcm")
"""Formats served straight from the stored take (no encoding, nothing extra stored)."""


def encoded_key(audio_key: str, fmt: str, bitrate: int | None = None) -> str:
    """Where the ``fmt`` encoding of the take at ``audio_key`` is stored."""
    return derived_key(audio_key, "encoded", format=fmt, bitrate=bitrate)


def encoded(target: CachedEngine | Cache, result: Result | Entry, fmt: Any, *,
            bitrate: int | None = None,
            encoder: Callable[[Audio, Any], bytes] | None = None) -> bytes:
    """Return ``result``'s take in ``fmt`` (a name or a service ``Format``), encoding once.

    ``target`` is the cache (or a cached engine); ``result`` a ``Result`` or a stored
    audio ``Entry``. wav and pcm are the stored bytes themselves.
    """
    cache: Cache = getattr(target, "cache", target)
    entry: Entry = getattr(result, "entry", result)
    name = fmt if isinstance(fmt, str) else fmt.name
    if name == "wav":
        return entry.blob
    if name == "pcm":
        return bytes(entry.payload)
    key = encoded_key(entry.header.key, name, bitrate)
    found = cache.get(key, "encoded")
    if found is not None:
        cache.count("encoded_hits")
        return bytes(found[0].payload)
    if encoder is None or isinstance(fmt, str):
        from .service.formats import encode, lookup

        encoder = encoder or encode
        fmt = lookup(name) if isinstance(fmt, str) else fmt
    data = encoder(entry.audio(), fmt)
    media = getattr(fmt, "media_type", f"audio/{name}")
    stored = blob_entry(key, "encoded", data, media, meta={
        "parent": entry.header.key, "format": name, "bitrate": bitrate,
        **{k: entry.header.meta.get(k) for k in ("tenant", "engine", "model", "voice", "text")}},
        ttl=None if entry.header.expires is None else max(
            1.0, entry.header.expires - time.time()))  # never outlives its PCM
    cache.put(stored, tenant=str(entry.header.meta.get("tenant", "")))
    cache.count("encoded_misses")
    return data
