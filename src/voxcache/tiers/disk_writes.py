"""The disk tier's write path: publish a take inline or as a file, first writer wins.

A write goes to a temp file in the target folder and is published with ``link``
(atomic, and fails if the name exists — first writer wins); a small entry of a kind
that may be goes to the inline store (``tiers.inline``). The index row follows, waiting
at most ``REQUEST_WAIT`` for a lock; what cannot be written then is deferred to the
flusher, so a local fault never fails a request.
"""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import sqlite3
import time

from ..entry import CorruptEntry, Entry, decode
from ..fsmode import private_dirs
from .disk_reads import DiskReads
from .eviction import take_seconds
from .index import REQUEST_WAIT, IndexRow
from .inline import FILE_KINDS, InlineDamaged, InlineUnavailable, record_name
from .inline import eligible as inline_eligible
from .layout import TEMP_PREFIX, entry_file, entry_path, write_pin
from .lifecycle import entry_stored

MAX_DEFERRED_ROWS = 100_000
"""Index rows kept for the flusher while the index cannot take them (oldest dropped)."""


class DiskWrites(DiskReads):
    """Writes, pins and deletes of the disk tier (``DiskTier`` holds the state)."""

    _deferred: collections.deque[IndexRow]
    _deferred_pins: dict[str, tuple[bool, float | None]]
    _last_fault: tuple[float, str] | None

    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> Entry | None:
        """Publish an entry unless a live take of its key is stored (first writer wins);
        the take stored afterwards — ``entry``, or the earlier writer's — or None if it
        could not be written (disk full, I/O error). An expired or damaged take is
        replaced."""
        return self._put(entry, tenant, pinned, pin_until, force=False)

    def replace(self, entry: Entry, *, tenant: str = "") -> bool:
        """Store ``entry`` whatever is stored under its key (a process adopting the take
        the shared tiers published); its row replaces the old one. False if not written."""
        return self._put(entry, tenant, False, None, force=True) is not None

    def _put(self, entry: Entry, tenant: str, pinned: bool, pin_until: float | None,
             force: bool) -> Entry | None:
        header = entry.header
        path = entry_file(self._objects, header.key, header.kind)
        try:
            held = self._store(path, entry, force)
        except OSError as exc:
            self.faults.report("write", exc, "a take could not be stored; served without "
                               "caching")
            self._last_fault = (time.monotonic(), f"a write failed: {os.strerror(exc.errno)}"
                                if exc.errno else f"a write failed: {exc}")
            return None
        if held is not entry:
            return held  # another writer's live take: first writer wins
        meta = header.meta
        row = IndexRow(
            key=header.key, kind=header.kind, size=entry.size, created=header.created,
            expires=header.expires, last_access=self._clock(), hits=0, pinned=pinned,
            pin_until=pin_until, tenant=tenant or str(meta.get("tenant", "")),
            engine=str(meta.get("engine", "")), model=str(meta.get("model", "")),
            voice=str(meta.get("voice") or ""), text=str(meta.get("text", ""))[:200],
            parent=str(meta.get("parent") or ""), cost=take_seconds(meta))
        try:
            self.index.add(row, REQUEST_WAIT, self._still_stored, replace=force)
        except sqlite3.Error as exc:
            self.index_fault("write", exc)
            with self._pending_lock:
                self._deferred.append(row)
        if pinned:
            self._write_pin(header.key, True, pin_until)
        return entry

    def _still_stored(self, row: IndexRow) -> bool:
        """Whether ``row``'s entry is stored now (``lifecycle.entry_stored``), asked under
        the index's write lock before the row goes in: a take removed since it was written
        (a purge from another process, a quarantine while its row waited) leaves no row."""
        return entry_stored(self._objects, self._inline, row.key, row.kind)

    def _store(self, path: str, entry: Entry, force: bool) -> Entry:
        """Publish inline (a small entry of a kind that may be) or as a file; the take held
        afterwards. Whichever holds a live take of the key first wins (unless ``force``): a
        file already at the path decides for a small entry, a live record for a large one."""
        key, kind = entry.header.key, entry.header.kind
        if self._inline is None or kind in FILE_KINDS:
            return self._publish(path, entry, force)
        try:
            if not inline_eligible(kind, entry.size):
                if force:  # a record would be read before the file: it must go
                    self._inline.delete(record_name(key, kind))
                live = None if force else self._live_record(key, kind)
                return live if live is not None else self._publish(path, entry, force)
            if os.path.lexists(path):
                return self._publish(path, entry, force)
            kept: list[Entry] = []
            self._inline.put(record_name(key, kind), entry.blob,
                             lambda existing: self._keep(existing, key, kind, kept, force))
            return kept[0] if kept else entry
        except InlineDamaged as exc:
            self._inline_damaged(exc)
        except InlineUnavailable as exc:
            self.faults.report("inline write", exc, "the inline store cannot take a write; "
                               "stored as a file")
        return self._publish(path, entry, force)

    def _live_record(self, key: str, kind: str) -> Entry | None:
        blob = self._inline.get(record_name(key, kind)) if self._inline else None
        if blob is None:
            return None
        entry = self._verified(blob, key, kind, inline=True)
        return None if entry is None or entry.header.expired(self._clock()) else entry

    def _keep(self, existing: bytes, key: str, kind: str, kept: list[Entry],
              force: bool) -> bool:
        """Inside a write: whether the record already there is a live take to keep (first
        writer wins; it goes into ``kept``); a damaged one is set aside and replaced."""
        try:
            entry = decode(existing, key)
        except CorruptEntry as exc:
            self._set_aside(key, kind, existing, str(exc))
            return False
        if entry.header.kind != kind:
            self._set_aside(key, kind, existing, f"holds a {entry.header.kind!r} entry")
            return False
        if force or entry.header.expired(self._clock()):
            return False
        kept.append(entry)
        return True

    def _publish(self, path: str, entry: Entry, force: bool = False) -> Entry:
        """Link a temp copy into place; the take held afterwards: ``entry`` (new, or over an
        expired or bad file, or over anything with ``force``) or the live take already
        there (first writer wins)."""
        folder = os.path.dirname(path)
        temp = f"{folder}/{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(temp, flags, 0o600)
        except FileNotFoundError:  # the key's shard folders do not exist yet
            private_dirs(folder)
            fd = os.open(temp, flags, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(entry.blob)
            if force:
                os.replace(temp, path)
                return entry
            try:
                os.link(temp, path)
                return entry
            except FileExistsError:
                pass
            key, kind = entry.header.key, entry.header.kind
            existing = self._read(path, key, kind)  # a bad one is quarantined here
            if existing is not None and not existing.header.expired(self._clock()):
                return existing
            if existing is not None:
                os.replace(temp, path)  # an expired take gives way to the new one
                return entry
            try:
                os.link(temp, path)
            except FileExistsError:  # another writer filled the freed name first
                again = self._read(path, key, kind)
                return again if again is not None else entry
            return entry
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def pin(self, key: str, pinned: bool = True, until: float | None = None) -> bool:
        """Pin (never evict, optionally until a time) or unpin; False if not stored."""
        try:
            indexed = self.index.set_pin(key, pinned, until, REQUEST_WAIT)
        except sqlite3.Error as exc:
            self.index_fault("pin", exc)
            with self._pending_lock:
                self._deferred_pins[key] = (pinned, until)
            indexed = False
        with self._pending_lock:
            deferred = any(row.key == key for row in self._deferred)
            if deferred:
                self._deferred_pins[key] = (pinned, until)
        if not (indexed or deferred or os.path.lexists(self.path_of(key))):
            return False
        return self._write_pin(key, pinned, until)

    def _write_pin(self, key: str, pinned: bool, until: float | None) -> bool:
        try:
            write_pin(self.root, key, pinned, until)
        except OSError as exc:
            self.faults.report("pin", exc, "a pin marker could not be written")
            return False
        return True

    def delete(self, key: str, kind: str = "audio") -> bool:
        """Remove an entry, then its row. Entry first: a folder walk running meanwhile
        either still finds the row (and leaves it to this) or no longer finds the entry;
        row first would let it index the file this is about to unlink. A row still waiting
        to be written (deferred) is forgotten before anything else, for the same reason."""
        with self._pending_lock:
            self._deferred = collections.deque((r for r in self._deferred if r.key != key),
                                               maxlen=MAX_DEFERRED_ROWS)
        with contextlib.suppress(OSError):
            write_pin(self.root, key, False, None)
        removed = self._drop_record(key, kind)
        try:
            entry_path(self.root, key, kind).unlink()
            removed = True
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            self.quarantine(key, kind, "a folder at an entry path")
            removed = True
        self._indexed("delete", lambda: self.index.remove([key], REQUEST_WAIT), 0)
        return removed

    def _drop_record(self, key: str, kind: str) -> bool:
        if self._inline is None or kind in FILE_KINDS:
            return False
        try:
            return self._inline.delete(record_name(key, kind))
        except InlineDamaged as exc:
            self._inline_damaged(exc)
        except InlineUnavailable as exc:
            self.faults.report("inline write", exc, "an inline entry could not be deleted")
        return False

