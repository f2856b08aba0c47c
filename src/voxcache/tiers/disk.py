"""Local disk tier: one standard file per entry, sharded ``objects/ab/cd/<key>.wav``.

Why it cannot serve a torn entry: a write goes to a temp file in the target
folder and is published with ``link`` (atomic, and fails if the name exists —
first writer wins); the reader verifies every byte of the file, so even a file
truncated by a power cut after publication is detected, quarantined and read
as a miss. A hit never touches SQLite: the path follows from the key, and the
access is recorded in a batch that a background thread flushes.

Why it cannot read outside the cache: an entry path is opened without following
a symlink and without blocking (a FIFO planted there cannot hang a reader), and
only a regular file of bounded size is read; anything else at an entry path is
quarantined like a corrupt file.

Why a local fault never fails a request: the index is an accelerator, so every
statement on a request's path waits at most ``REQUEST_WAIT`` for a lock, and what
cannot be written then is deferred to the flusher; a damaged index is rebuilt
from the files in the background (``repair``) while hits and misses go on.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from ..entry import CorruptEntry, Entry, decode
from ..errors import CacheDirError
from ..fsmode import private_dirs, write_private
from . import sessions
from .base import OK, TierHealth
from .entry_files import NotAnEntryFile, read_entry_file
from .eviction import take_seconds
from .faults import FaultLog
from .index import REQUEST_WAIT, Index, IndexRow, is_damaged
from .index_file import Identity
from .inline import (
    FILE_KINDS,
    InlineDamaged,
    InlineStore,
    InlineUnavailable,
    record_name,
)
from .inline import acquire as acquire_inline
from .inline import eligible as inline_eligible
from .inline import release as release_inline
from .layout import (
    SUBFOLDERS,
    TEMP_PREFIX,
    entry_file,
    entry_path,
    pin_file,
    suffix_of,
    write_pin,
)
from .lifecycle import entry_stored, reconcile
from .repair import open_index, rebuild_damaged
from .roles import TierRole

log = logging.getLogger("voxcache.disk")
T = TypeVar("T")

NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs"}
MAX_DEFERRED_ROWS = 100_000


class DiskTier:
    """Files plus an SQLite index; eviction and reconciliation live in ``lifecycle``."""

    name = "disk"
    durable = True
    role = TierRole.FOLDER

    def __init__(self, root: Path, *, flush_interval: float = 2.0, check_at_start: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self._clock = clock
        self._pending: dict[str, tuple[int, float]] = {}
        self._counters: dict[str, int] = {}
        self._deferred: collections.deque[IndexRow] = collections.deque(maxlen=MAX_DEFERRED_ROWS)
        self._deferred_pins: dict[str, tuple[bool, float | None]] = {}
        self._pending_lock = threading.Lock()
        self.faults = FaultLog(log, self.count)
        refuse_network_filesystem(self.root)  # before anything is made there
        # Then, before anything here can leave a temp file: this process's session
        # record (a crash from now on makes the next start walk the folder).
        self.session, self.start_state = sessions.begin(self.root)
        self._inline: InlineStore | None = None
        try:
            _prepare_root(self.root)
            # Before the index: rebuilding one reads the store, which must be trusted first.
            self._inline = acquire_inline(self.root, distrust=self.start_state.rebooted)
            if self._inline is not None and self._inline.set_aside is not None:
                sessions.mark_unchecked(self.root)  # its entries' rows must go: walk
                self.start_state = sessions.start_state(self.root)
            self.index = open_index(self.root, new_folder=self.start_state.new)
        except BaseException:
            if self._inline is not None:
                release_inline(self._inline)
            self.session.end(clean=True)  # it never used the folder
            raise
        self._objects = str(self.root / "objects")
        self._repairing = threading.Lock()
        self._last_fault: tuple[float, str] | None = None
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, args=(flush_interval,),
                                         name="voxcache-disk-flush", daemon=True)
        self._flusher.start()
        self.walk_reason: str | None = None
        """Why this start walked the folder (None: it was known consistent, or no check)."""
        self.startup_check: threading.Thread | None = None
        if check_at_start:
            self.startup_check = threading.Thread(target=self._check_at_start,
                                                  name="voxcache-disk-check", daemon=True)
            self.startup_check.start()

    def _check_at_start(self) -> None:
        """Rebuild the index if it is marked (new, or set up in place of a damaged one) or
        its pages are damaged (``repair``); then walk the folder — sweep crash-left temp
        and lock files, reconcile the index with the files — only when a process that used
        it did not close cleanly (``sessions``). Off the request path: a million-entry
        folder takes seconds to check and to walk."""
        try:
            needed = self.index.rebuilding() or not self.index.check_pages()
        except sqlite3.Error as exc:
            self._index_fault("start-up check", exc)
            needed = False
        if needed:
            with self._repairing:
                self._rebuild()
        if self.start_state.walk_reason is not None:
            self._walk()

    def _walk(self, because: str | None = None) -> None:
        """Reconcile the index with what is stored, once per folder at a time (another
        process may have walked while this one waited: then there is nothing left to do)."""
        try:
            with sessions.walk_lock(self.root):
                state = sessions.start_state(self.root, because)
                if state.walk_reason is None:
                    return
                self.walk_reason = state.walk_reason
                log.info("disk tier: checking the folder (%s)", state.walk_reason)
                report = reconcile(self.root, self.index)
                sessions.finish_walk(self.root, state)
        except Exception as exc:  # never take the process down over an accelerator
            self._index_fault("start-up check", exc)
            return
        self.count("folder_walks")
        if any(report.values()):
            log.warning("disk tier: the check repaired the index: %s", report)

    # -- reads -------------------------------------------------------------
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

    def health(self) -> TierHealth:
        """``degraded`` while the index is rebuilt or within a minute of a failed write."""
        if self._repairing.locked():
            return TierHealth("degraded", "the index is being rebuilt from the files")
        if self._last_fault is not None and time.monotonic() - self._last_fault[0] < 60:
            return TierHealth("degraded", self._last_fault[1])
        return OK

    def stats(self) -> dict[str, Any]:
        """Entries and bytes stored (None while the index cannot say)."""
        totals = self.totals()
        return {"entries": None if totals is None else totals[1],
                "bytes": None if totals is None else totals[0]}

    def path_of(self, key: str, kind: str = "audio") -> Path:
        """Return the file path an entry would have (it may not exist)."""
        return entry_path(self.root, key, kind)

    def is_pinned(self, key: str) -> bool:
        """Whether ``key`` carries a pin marker (one stat, no index)."""
        return os.path.lexists(pin_file(self.root, key))

    def owner(self, key: str) -> str | None:
        """The tenant the index says owns ``key`` (None: not indexed, or no index now)."""
        return self._indexed("owner lookup", lambda: self.index.owner(key, REQUEST_WAIT), None)

    # -- writes ------------------------------------------------------------
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
            self._index_fault("write", exc)
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
            self._index_fault("pin", exc)
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

    def totals(self) -> tuple[int, int] | None:
        """(bytes, entries) stored, or None while the index cannot say."""
        return self._indexed("totals", lambda: self.index.totals(REQUEST_WAIT), None)

    def counters(self) -> dict[str, int] | None:
        """The persisted counters, or None while the index cannot say."""
        return self._indexed("counters", lambda: self.index.counters(REQUEST_WAIT), None)

    def rows(self, where: str = "1", args: tuple[object, ...] = (),
             order: str = "last_access DESC", limit: int = -1) -> list[IndexRow] | None:
        """Index rows matching a condition (internal callers), or None while the index
        cannot say."""
        return self._indexed("listing", lambda: self.index.rows(where, args, order, limit),
                             None)

    def children(self, key: str) -> list[tuple[str, str]]:
        """(key, kind) of the stored entries derived from ``key`` (encoded deliveries)."""
        return self._indexed("children lookup", lambda: self.index.children(key, REQUEST_WAIT),
                             [])

    def quarantine(self, key: str, kind: str, reason: str) -> None:
        """Move a bad file aside for inspection, drop its row and count it."""
        src = entry_path(self.root, key, kind)
        dest = self.root / "quarantine" / f"{src.name}.{int(self._clock())}-{secrets.token_hex(3)}"
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
        name = f"{key}{suffix_of(kind)}.inline.{int(self._clock())}-{secrets.token_hex(3)}"
        try:
            write_private(self.root / "quarantine" / name, blob)
        except OSError as exc:
            self.faults.report("quarantine", exc, f"could not keep {key}'s bad bytes")
        log.warning("disk tier: quarantined inline entry %s: %s", key, reason)
        self.count("corruptions")

    def _inline_damaged(self, exc: Exception) -> None:
        """LMDB reported damage: an empty store takes its place, and a walk in the
        background drops the index rows of the entries that went with it."""
        self.faults.report("inline store", exc, "the inline store is damaged; replaced by "
                           "an empty one")
        self.count("corruptions")
        store = self._inline
        if store is None:
            return
        sessions.mark_unchecked(self.root)
        try:
            store.replace_damaged(str(exc))
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
            self._index_fault(what, exc)
            return default

    def _index_fault(self, what: str, exc: BaseException) -> None:
        self.faults.report("index", exc, f"index {what} failed; serving on without it")
        if is_damaged(exc):
            self.start_repair()

    def start_repair(self, known: tuple[Identity | None, str] | None = None) -> bool:
        """Rebuild a damaged index in the background (once at a time); True if started.
        ``known``: the identity of the file found unsound, and why (``repair.rebuild_damaged``).
        Not once closing: the next process to open the folder finds what is left to do."""
        if self._stop.is_set() or not self._repairing.acquire(blocking=False):
            return False
        threading.Thread(target=self._repair, args=(known,), name="voxcache-index-repair",
                         daemon=True).start()
        return True

    def _repair(self, known: tuple[Identity | None, str] | None) -> None:
        try:
            self._rebuild(known=known)
        finally:
            self._repairing.release()

    def _rebuild(self, check_pages: bool = True,
                 known: tuple[Identity | None, str] | None = None) -> None:
        try:
            rebuild_damaged(self.root, self.index, check_pages, known)
        except Exception as exc:
            self.faults.report("index repair", exc, "the index could not be rebuilt; "
                               "`voxcache gc --rebuild-index` does it offline")

    def _watch_index(self) -> None:
        """Once a flush (``Index.watch``): start a rebuild when the path holds no sound
        index (removed, replaced, overwritten, its ``-wal``/``-shm`` removed) or the index
        is marked and no rebuild runs here (it waits for another process's, and takes over
        from one that died). An idle process notices within one flush interval; any
        statement notices a removed or replaced file at once (``Index._connect``)."""
        identity, problem, marked = self.index.watch()
        if problem is not None:
            self.start_repair((identity, problem))
        elif marked:
            self.start_repair()

    def settle(self) -> None:
        """Wait until the index holds a row for every stored entry — the start-up check and
        any rebuild, this process's or another's — for the tools that report from it
        (``stats``, ``ls``, ``gc``, packs). Requests never wait for this."""
        if self.startup_check is not None:
            self.startup_check.join()
        with self._repairing:
            self._rebuild(check_pages=False)

    # -- bookkeeping ---------------------------------------------------------
    def count(self, name: str, delta: int = 1) -> None:
        """Add to a persisted counter (written with the next flush)."""
        with self._pending_lock:
            self._counters[name] = self._counters.get(name, 0) + delta

    def flush(self) -> None:
        """Write batched accesses, counters and deferred rows to the index."""
        self._indexed("check", self._watch_index, None)
        if self._inline is not None:
            try:
                self._inline.maintain()
            except (OSError, InlineUnavailable) as exc:
                self.faults.report("inline store", exc, "inline store upkeep failed")
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            counters, self._counters = self._counters, {}
            deferred, pins = list(self._deferred), self._deferred_pins
            self._deferred.clear()
            self._deferred_pins = {}
        try:
            if deferred:
                self.index.add_many(deferred, stored=self._still_stored)
            for key, (pinned, until) in pins.items():
                self.index.set_pin(key, pinned, until)
            if pending:
                self.index.record_access(pending)
            self.index.add_counters(counters)
        except sqlite3.Error as exc:  # the index is an accelerator: keep it for the next try
            self._index_fault("flush", exc)
            with self._pending_lock:
                for name, delta in counters.items():
                    self._counters[name] = self._counters.get(name, 0) + delta
                self._deferred.extendleft(reversed(deferred))
                self._deferred_pins = {**pins, **self._deferred_pins}

    def _flush_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.flush()

    def close(self) -> None:
        """Flush, stop the background flusher, and end this process's session: cleanly
        (the next start skips the walk) only if the index took every row it is owed."""
        self._stop.set()
        self._flusher.join(timeout=5)
        self.index.interrupt_check()  # a page check at start need not finish: the next does
        if self.startup_check is not None:
            self.startup_check.join(timeout=30)
        self.flush()
        with self._pending_lock:
            owed = bool(self._deferred or self._deferred_pins)
        self.index.close()
        if self._inline is not None:
            release_inline(self._inline)  # the last handle syncs what this process wrote
            self._inline = None
        self.session.end(clean=not owed and not _in_memory(self.index))


def _prepare_root(root: Path) -> None:
    """Create the cache folders (0700) and prove we can write there."""
    try:
        for sub in SUBFOLDERS:
            private_dirs(root / sub)
        os.chmod(root, 0o700)
        probe = root / f"{TEMP_PREFIX}{os.getpid()}-probe"
        try:
            write_private(probe, b"ok")
        finally:
            probe.unlink(missing_ok=True)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # Full, not broken: render anyway; each take says it was not stored.
            log.warning("disk tier: %s is full; takes are served but not cached until "
                        "space is freed", root)
            return
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise CacheDirError(
            f"cache folder {root} is not usable: {reason}. Choose another with "
            "--cache-dir or VOXCACHE_DIR, or fix its permissions."
        ) from None


_hit_record_name = lru_cache(maxsize=4096)(record_name)
"""``record_name`` for the hit path: the name of a key read again is built once (~0.07 µs
from the cache against ~0.18 µs for ``bytes.fromhex`` and the suffix)."""


def _in_memory(index: Index) -> bool:
    """True for the stand-in index of a full disk: its rows die with the process."""
    return str(index.path).startswith("file:")


MOUNTS = "/proc/mounts"
"""Where the mount table is read (a test points it at a table of its own)."""


def refuse_network_filesystem(root: Path) -> None:
    """Refuse a cache folder on NFS/SMB: SQLite's locking and ``flock`` are not reliable
    there, so the index could be corrupted and single flight would not hold. The place
    for what several machines share is a shared tier, with a local folder on each."""
    fstype = filesystem_type(root, MOUNTS)
    if fstype in NETWORK_FILESYSTEMS:
        raise CacheDirError(
            f"cache folder {root} is on a network filesystem ({fstype}): SQLite and file locks "
            "are not safe there. Give each node a local cache_dir (--cache-dir, VOXCACHE_DIR) "
            "and share takes through the shared tiers instead: tiers = [\"memory\", \"disk\", "
            "\"redis://host:6379/0\", \"s3://bucket/prefix\"] (docs/operating/cluster.md)")


def filesystem_type(path: Path, mounts: str = "/proc/mounts") -> str:
    """Return the filesystem type of the mount holding ``path`` (Linux /proc/mounts)."""
    target = os.path.realpath(path)
    best, fstype = "", "unknown"
    try:
        with open(mounts) as table:
            for line in table:
                fields = line.split()
                if len(fields) >= 3:
                    mount = fields[1]
                    inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                    if inside and len(mount) > len(best):
                        best, fstype = mount, fields[2]
    except OSError:
        pass
    return fstype
