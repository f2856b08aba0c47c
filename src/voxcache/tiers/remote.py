"""What the shared tiers (Redis, S3) have in common: names they accept, counters, object refs.

A shared tier is written by every node and readable by anyone with the server's
password, so nothing it returns is trusted: every value is decoded and verified
against the key it was asked for (``entry.decode``) and the kind it was stored as,
and anything else is a miss that is counted and removed. Keys and kinds become
parts of Redis keys and object names, so only the spellings voxcache itself
produces are accepted; anything else is refused as a miss, never sent.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import xxhash

from ..entry import Entry

_KEY = re.compile(r"[0-9a-f]{64}")
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def valid_name(key: str, kind: str) -> bool:
    """True for a key and kind voxcache produces (a BLAKE3 hex digest, a short kind name)."""
    return _KEY.fullmatch(key) is not None and _KIND.fullmatch(kind) is not None


def blob_digest(blob: bytes) -> str:
    """The digest a pointer records for a stored object (XXH3-128 of every byte, hex)."""
    return xxhash.xxh3_128_hexdigest(blob)


def redacted(url: str) -> str:
    """``url`` without its password, for logs, health details and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


class Counters:
    """Per-tier event counts (hits, misses, corruptions, errors…) for stats and metrics."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, name: str, delta: int = 1) -> None:
        """Add ``delta`` to counter ``name``."""
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + delta

    def snapshot(self) -> dict[str, int]:
        """A copy of every counter."""
        with self._lock:
            return dict(self._counts)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One stored object, as a Redis pointer names it: its name, size and digest."""

    name: str
    size: int
    digest: str


class ObjectStore(Protocol):
    """What the Redis tier needs of the tier that holds its large entries (the S3 tier)."""

    def object_name(self, key: str, kind: str) -> str:
        """Where an entry of ``key`` and ``kind`` is stored."""

    def store(self, entry: Entry) -> ObjectRef | None:
        """Store ``entry`` (first writer wins) and name what is stored under its key now:
        ours, or the live object another writer stored first. None when not stored."""

    def replace(self, entry: Entry, *, tenant: str = "") -> bool:
        """Store ``entry`` whatever is stored under its key."""

    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """The verified, unexpired entry, or None."""

    def delete(self, key: str, kind: str | None = "audio") -> bool:
        """Remove an entry; True if it was there."""
