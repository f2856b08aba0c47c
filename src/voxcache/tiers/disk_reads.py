"""The disk tier's read path: from key to verified entry, and quarantine for what fails.

A hit never touches SQLite: the path follows from the key, the reader verifies every
byte (``entry.decode``), so even a file truncated by a power cut after publication is
detected, quarantined and read as a miss; the access is recorded in a batch that the
flusher writes. An entry path is opened without following a symlink and without
blocking (a FIFO planted there cannot hang a reader), and only a regular file of
bounded size is read; anything else at an entry path is quarantined like a corrupt file.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from ..entry import CorruptEntry, Entry, decode
from ..fsmode import write_private
from . import openers
from .entry_files import NotAnEntryFile, read_entry_file
from .faults import FaultLog
from .index import REQUEST_WAIT, Index, is_damaged
from .index_file import Identity
from .inline import FILE_KINDS, InlineDamaged, InlineStore, InlineUnavailable, record_name
from .inline import release as release_inline
from .layout import aside, entry_file, entry_path, pin_file, suffix_of

log = logging.getLogger("voxcache.disk")
T = TypeVar("T")

_hit_record_name = lru_cache(maxsize=4096)(record_name)
"""``record_name`` for the hit path: the name of a key read again is built once (~0.07 µs
from the cache against ~0.18 µs for ``bytes.fromhex`` and the suffix)."""


class DiskReads:
    """Reads, verification and quarantine of the disk tier (``DiskTier`` holds the state)."""

    root: Path
    index: Index
    faults: FaultLog
    _objects: str
    _inline: InlineStore | None
    _clock: Callable[[], float]
    _pending: dict[str, tuple[int, float]]
    _pending_lock: threading.Lock
    _counters: dict[str, int]

    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """Return the verified, unexpired entry, or None (anything bad is quarantined)."""
        entry = self._read(None, key, kind)
        if entry is None:
            return None
        now = self._clock()
        if entry.header.expired(now):
            return None
        self.note_hit(key, now)
        return entry

    def note_hit(self, key: str, now: float | None = None) -> None:
        """Count a hit of ``key`` for eviction (flushed in a batch). Hits served from the
        memory tier are noted here too: a phrase hot in memory must not look cold on disk.

        The lock stays (~0.15 µs): without it a note racing the flusher's swap of
        ``_pending`` can be lost, and a lock-free queue only moves the same folding to the
        flusher, unbounded at in-process hit rates."""
        now = self._clock() if now is None else now
        with self._pending_lock:
            pending = self._pending
            noted = pending.get(key)
            pending[key] = (1, now) if noted is None else (noted[0] + 1, now)

    def _read(self, path: str | None, key: str, kind: str) -> Entry | None:
        """The verified entry of (key, kind), inline or in the file at ``path`` (derived
        from key and kind when None, and only if no record answers), regardless of
        expiry; None when absent or bad."""
        store = self._inline
        if store is not None and kind not in FILE_KINDS:
            try:
                blob = store.get(_hit_record_name(key, kind))
            except InlineDamaged as exc:
                self._inline_damaged(exc)
                return None
            except InlineUnavailable as exc:
                self.faults.report("inline read", exc, "the inline store cannot answer; "
                                   "treating it as a miss")
                blob = None
            if blob is not None:
                return self._verified(blob, key, kind, inline=True)
        if path is None:
            path = entry_file(self._objects, key, kind)
        try:
            blob = read_entry_file(path)
        except FileNotFoundError:
            return None
        except NotAnEntryFile as exc:
            self.quarantine(key, kind, str(exc))
            return None
        except OSError as exc:
            self.faults.report("read", exc, f"cannot read {path}; treating it as a miss")
            return None
        return self._verified(blob, key, kind, inline=False)

    def _verified(self, blob: bytes, key: str, kind: str, *, inline: bool) -> Entry | None:
        """``decode`` of a stored object; anything it refuses is quarantined (None)."""
        try:
            entry = decode(blob, key)
        except CorruptEntry as exc:
            self._quarantine_stored(key, kind, blob, str(exc), inline)
            return None
        if entry.header.kind != kind:  # a valid entry of another kind planted at this path
            self._quarantine_stored(key, kind, blob,
                                    f"holds a {entry.header.kind!r} entry, not {kind!r}", inline)
            return None
        return entry

    def _quarantine_stored(self, key: str, kind: str, blob: bytes, reason: str,
                           inline: bool) -> None:
        if inline:
            self.quarantine_record(key, kind, blob, reason)
        else:
            self.quarantine(key, kind, reason)

    def read_stored(self, key: str, kind: str = "audio") -> bytes | None:
        """The stored bytes of (key, kind) as they are — an inline record or the file —
        unverified, and without counting a hit or moving anything (tools: ``explain``,
        packs). None when nothing is stored; ``NotAnEntryFile`` for something planted at
        the path. Callers verify with ``entry.decode``."""
        if self._inline is not None and kind not in FILE_KINDS:
            try:
                blob = self._inline.get(record_name(key, kind))
            except (InlineDamaged, InlineUnavailable):
                blob = None
            if blob is not None:
                return blob
        try:
            return read_entry_file(str(self.path_of(key, kind)))
        except FileNotFoundError:
            return None

    def contains(self, key: str, kind: str = "audio") -> bool:
        """Whether an entry is stored under (key, kind) (unverified: a read may still
        refuse it)."""
        if os.path.lexists(self.path_of(key, kind)):
            return True
        if self._inline is None or kind in FILE_KINDS:
            return False
        try:
            return self._inline.has(record_name(key, kind))
        except (InlineDamaged, InlineUnavailable):
            return False

    def path_of(self, key: str, kind: str = "audio") -> Path:
        """Return the file path an entry would have (it may not exist)."""
        return entry_path(self.root, key, kind)

    def is_pinned(self, key: str) -> bool:
        """Whether ``key`` carries a pin marker (one stat, no index)."""
        return os.path.lexists(pin_file(self.root, key))

    def quarantine(self, key: str, kind: str, reason: str) -> None:
        """Move a bad file aside for inspection, drop its row and count it."""
        src = entry_path(self.root, key, kind)
        dest = aside(self.root, src.name, self._clock())
        try:
            os.replace(src, dest)
            log.warning("disk tier: quarantined %s: %s", key, reason)
        except FileNotFoundError:
            pass
        except OSError as exc:  # cannot move it: at least never serve it
            self.faults.report("quarantine", exc, f"could not quarantine {key}")
        self._indexed("quarantine", lambda: self.index.remove([key], REQUEST_WAIT), 0)
        self.count("corruptions")

    def quarantine_record(self, key: str, kind: str, blob: bytes, reason: str) -> None:
        """An inline record that failed verification: its bytes to ``quarantine/``, the
        record (if it still holds those bytes) and its row dropped, counted."""
        self._set_aside(key, kind, blob, reason)
        if self._inline is not None:
            try:
                self._inline.delete(record_name(key, kind), lambda current: current == blob)
            except (InlineDamaged, InlineUnavailable) as exc:
                self.faults.report("quarantine", exc, f"could not drop {key} from the inline "
                                   "store")
        self._indexed("quarantine", lambda: self.index.remove([key], REQUEST_WAIT), 0)

    def _set_aside(self, key: str, kind: str, blob: bytes, reason: str) -> None:
        try:
            write_private(aside(self.root, f"{key}{suffix_of(kind)}.inline", self._clock()),
                          blob)
        except OSError as exc:
            self.faults.report("quarantine", exc, f"could not keep {key}'s bad bytes")
        log.warning("disk tier: quarantined inline entry %s: %s", key, reason)
        self.count("corruptions")

    def _inline_damaged(self, exc: InlineDamaged) -> None:
        """LMDB reported damage: an empty store takes its place, and a walk in the
        background drops the index rows of the entries that went with it."""
        self.faults.report("inline store", exc, "the inline store is damaged; replaced by "
                           "an empty one")
        self.count("corruptions")
        store = self._inline
        if store is None:
            return
        openers.mark_unchecked(self.root)
        try:
            store.replace_damaged(exc)
        except (OSError, InlineUnavailable) as again:
            self.faults.report("inline store", again, "the damaged inline store could not "
                               "be replaced; small entries go to files")
            self._inline = None
            release_inline(store)
        threading.Thread(target=self._walk, args=("the inline store was damaged",),
                         name="voxcache-disk-check", daemon=True).start()

    # -- the index, failing open -------------------------------------------------------
    def _indexed(self, what: str, call: Callable[[], T], default: T) -> T:
        """Run an index statement; on any SQLite failure count it, log it once per cause,
        start a rebuild when the file is damaged, and carry on with ``default``."""
        try:
            return call()
        except sqlite3.Error as exc:
            self.index_fault(what, exc)
            return default

    def index_fault(self, what: str, exc: BaseException) -> None:
        """Count and log an index failure once per cause; start a rebuild on damage."""
        self.faults.report("index", exc, f"index {what} failed; serving on without it")
        if is_damaged(exc):
            self.start_repair()

    def count(self, name: str, delta: int = 1) -> None:
        """Add to a persisted counter (written with the next flush)."""
        with self._pending_lock:
            self._counters[name] = self._counters.get(name, 0) + delta

    def start_repair(self, known: tuple[Identity | None, str] | None = None) -> bool:
        """Rebuild a damaged index in the background (``DiskTier.start_repair``)."""
        raise NotImplementedError

    def _walk(self, because: str | None = None) -> None:
        """Reconcile the index with what is stored (``DiskTier._walk``)."""
        raise NotImplementedError
