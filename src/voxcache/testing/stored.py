"""Reaching a stored entry's bytes from a test, wherever the disk tier keeps them.

Small entries of some kinds live inline (``tiers.inline``), larger ones and every take
as files; a test that damages or inspects "what is on disk" should not care which. These
helpers read the stored bytes and overwrite them the way anyone with write access to the
cache folder could (a file written in place, a record put into the store).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..cache import Cache
from ..entry import CorruptEntry, decode
from ..tiers import inline
from ..tiers.layout import entry_path


def stored_bytes(cache: Cache, key: str, kind: str = "audio") -> bytes | None:
    """The bytes stored for (key, kind), or None."""
    return cache.folder.read_stored(key, kind)


def overwrite_stored(cache: Cache, key: str, kind: str, blob: bytes) -> None:
    """Replace what is stored for (key, kind) with ``blob``, behind the cache's back."""
    path = entry_path(cache.root, key, kind)
    if path.exists() or not inline.eligible(kind, len(blob)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
        return
    with inline.opened(cache.root) as store:
        if store is None:
            raise RuntimeError("the inline store cannot be opened")
        store.put(inline.record_name(key, kind), blob, lambda existing: False)


def undetected_flips(blob: bytes, key: str,
                     bits: Iterable[int] = (0x01, 0x80)) -> list[tuple[int, int]]:
    """(offset, bit) of every single-byte flip of ``blob`` that ``entry.decode`` still
    accepts as the entry stored under ``key``: a verified entry has none."""
    missed = []
    for offset in range(len(blob)):
        for bit in bits:
            damaged = bytearray(blob)
            damaged[offset] ^= bit
            try:
                decode(bytes(damaged), key)
            except CorruptEntry:
                continue
            missed.append((offset, bit))
    return missed
