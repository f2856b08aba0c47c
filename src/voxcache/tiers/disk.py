"""Local disk tier: one standard file per entry, sharded ``objects/ab/cd/<key>.wav``,
small ones inline (``tiers.inline``), and the folder's SQLite index beside them.

The read path (``disk_reads``) verifies every byte and never touches SQLite; the write
path (``disk_writes``) publishes atomically, first writer wins. This module holds the
state and the upkeep: opening the folder, the start-up check, the flusher and repairs.
A local fault never fails a request: the index is an accelerator, every statement on a
request's path waits at most ``REQUEST_WAIT``, what cannot be written then is deferred
to the flusher, and a damaged index is rebuilt in the background (``repair``).
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import CacheDirError
from ..fsmode import private_dirs, write_private
from . import openers
from .absorb import absorb_old_stores
from .base import OK, TierHealth
from .disk_writes import MAX_DEFERRED_ROWS, DiskWrites
from .faults import FaultLog
from .index import REQUEST_WAIT, Index, IndexRow
from .index_file import Identity
from .inline import (
    InlineStore,
    InlineUnavailable,
)
from .inline import acquire as acquire_inline
from .inline import release as release_inline
from .layout import (
    SUBFOLDERS,
    TEMP_PREFIX,
)
from .lifecycle import reconcile
from .repair import open_index, rebuild_damaged
from .roles import TierRole

log = logging.getLogger("voxcache.disk")
T = TypeVar("T")

NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs"}


class DiskTier(DiskWrites):
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
        self.session, self.start_state = openers.begin(self.root)
        self._inline: InlineStore | None = None
        try:
            _prepare_root(self.root)
            # Before the index: rebuilding one reads the store, which must be trusted first.
            self._inline = acquire_inline(self.root, distrust=self.start_state.rebooted)
            if self._inline is not None and self._inline.set_aside is not None:
                openers.mark_unchecked(self.root)  # its entries' rows must go: walk
                self.start_state = openers.start_state(self.root)
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
        self._old_stores = not _in_memory(self.index)  # never into a process-private index
        self._absorb_old_stores()
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
            self.index_fault("start-up check", exc)
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
            with openers.walk_lock(self.root):
                state = openers.start_state(self.root, because)
                if state.walk_reason is None:
                    return
                self.walk_reason = state.walk_reason
                log.info("disk tier: checking the folder (%s)", state.walk_reason)
                report = reconcile(self.root, self.index)
                openers.finish_walk(self.root, state)
        except Exception as exc:  # never take the process down over an accelerator
            self.index_fault("start-up check", exc)
            return
        self.count("folder_walks")
        if any(report.values()):
            log.warning("disk tier: the check repaired the index: %s", report)

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

    def owner(self, key: str) -> str | None:
        """The tenant the index says owns ``key`` (None: not indexed, or no index now)."""
        return self._indexed("owner lookup", lambda: self.index.owner(key, REQUEST_WAIT), None)

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
    def _absorb_old_stores(self) -> None:
        """Move the folder's old store files into the index (``tiers.absorb``); one that
        cannot be moved now (the index locked, the folder read-only) is tried each flush."""
        if not self._old_stores:
            return
        try:
            self._old_stores = not absorb_old_stores(self.root, self.index)
        except (sqlite3.Error, OSError) as exc:
            self.index_fault("absorbing the old stores", exc)

    def flush(self, wait: float | None = None) -> None:
        """Write batched accesses, counters and deferred rows to the index, waiting at most
        ``wait`` for another process's lock (``REQUEST_WAIT`` on a scrape); what cannot be
        written then is kept for the next flush."""
        self._indexed("check", self._watch_index, None)
        self._absorb_old_stores()
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
                self.index.add_many(deferred, wait, stored=self._still_stored)
            for key, (pinned, until) in pins.items():
                self.index.set_pin(key, pinned, until, wait)
            if pending:
                self.index.record_access(pending, wait)
            self.index.add_counters(counters, wait)
        except sqlite3.Error as exc:  # the index is an accelerator: keep it for the next try
            self.index_fault("flush", exc)
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