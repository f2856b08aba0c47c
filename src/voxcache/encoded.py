"""Encoded variants: mp3/opus/flac deliveries cached next to the one canonical PCM take.

An encoding is a pure function of the take, keyed ``derived_key(audio_key, "encoded",
format=…, bitrate=…)`` (a delivery rate in the key when it differs), stored in memory and
on disk, and evicted before any PCM (``tiers.lifecycle.VICTIMS``): losing one costs an
encode, losing the PCM a render. Encodings load once (``voxcache.loading``).
"""

from __future__ import annotations

import time
from typing import Protocol

from .cache import Cache
from .entry import Entry, blob_entry
from .formats import Format, encode, lookup
from .key import derived_key
from .loading import Made, loader_of
from .outcome import Progress, Result


class _HasCache(Protocol):
    """Anything that carries a cache (a ``CachedEngine``)."""

    cache: Cache

ENCODE_WAIT = 30.0
"""Longest a caller waits for another caller's encoding of the same delivery (or its
lock) before it encodes itself."""
PASSTHROUGH = ("wav", "pcm")
"""Formats served straight from the stored take (no encoding, nothing extra stored) when
they are delivered at the take's own rate."""


def passthrough(fmt: Format, take_rate: int) -> bool:
    """True when ``fmt`` is the stored samples themselves for a take at ``take_rate``."""
    return fmt.name in PASSTHROUGH and fmt.rate_for(take_rate) == take_rate


def encoded_key(audio_key: str, fmt: str, bitrate: int | None = None,
                rate: int | None = None) -> str:
    """Where the ``fmt`` encoding of the take at ``audio_key`` is stored (``rate``: the
    format's own delivery rate, when it has one)."""
    extra = {} if rate is None else {"rate": rate}
    return derived_key(audio_key, "encoded", format=fmt, bitrate=bitrate, **extra)


def key_of(audio_key: str, fmt: Format, bitrate: int | None = None) -> str:
    """``encoded_key`` for a ``Format`` (its delivery rate included)."""
    return encoded_key(audio_key, fmt.name, bitrate, fmt.sample_rate)


def encoded(target: _HasCache | Cache, result: Result | Entry, fmt: str | Format, *,
            bitrate: int | None = None) -> bytes:
    """Return ``result``'s take in ``fmt`` (a name or a ``Format``), encoding it once.

    ``target`` is the cache (or a cached engine); ``result`` a ``Result`` or a stored
    audio ``Entry``. wav and pcm at the take's own rate are the stored bytes themselves
    (wav: the stored file, envelope chunk included).
    """
    cache: Cache = getattr(target, "cache", target)
    entry: Entry = getattr(result, "entry", result)
    fmt = lookup(fmt) if isinstance(fmt, str) else fmt
    if passthrough(fmt, entry.header.sample_rate):
        return entry.blob if fmt.name == "wav" else bytes(entry.payload)
    key = key_of(entry.header.key, fmt, bitrate)
    delivery = _Delivery(cache, entry, fmt, bitrate)
    found, how = loader_of(cache).load(key, "encoded", delivery, wait=ENCODE_WAIT)
    cache.count("encoded_hits" if how == "hit" else "encoded_misses" if how == "made"
                else "encoded_joins")
    return bytes(found.payload)


class _Delivery:
    """What an encoding is made of, for the load-once path (``loading.Recipe``)."""

    def __init__(self, cache: Cache, entry: Entry, fmt: Format, bitrate: int | None) -> None:
        self.cache, self.entry, self.fmt, self.bitrate = cache, entry, fmt, bitrate

    def found(self, entry: Entry, tier: str, inside_lock: bool) -> Entry:
        return entry

    def make(self, sink: Progress) -> Made[Entry]:
        take, fmt = self.entry, self.fmt
        data = encode(take.audio(), fmt)
        stored = blob_entry(key_of(take.header.key, fmt, self.bitrate), "encoded", data,
                            fmt.media_type, meta={
                                "parent": take.header.key, "format": fmt.name,
                                "bitrate": self.bitrate,
                                "rate": fmt.rate_for(take.header.sample_rate),
                                **{k: take.header.meta.get(k)
                                   for k in ("tenant", "engine", "model", "voice", "text")}},
                            ttl=None if take.header.expires is None else max(
                                1.0, take.header.expires - time.time()))  # never outlives its PCM
        return Made(stored, stored, str(take.header.meta.get("tenant", "")))

    def admit(self, made: Made[Entry]) -> Made[Entry]:
        return made  # an encoding of a stored take is stored with it

    def published(self, made: Entry, held: Entry | None) -> Entry:
        return held or made

    def joined(self, value: Entry, sink: Progress, replayed: int) -> Entry:
        return value
