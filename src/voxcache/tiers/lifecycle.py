"""Keeping the disk tier healthy: caps, TTL, pins, stale temp files, index rebuilds.

These run offline (``voxcache gc``), after writes that push the tier over its
cap, and once at start in the background. A reader never sees half an entry (files
are published and removed whole); the index never keeps a row for an entry that is
gone, because the walk confirms each entry under the index's write lock before it
adds its row, and every remover takes the entry away before its row or under that
same lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..entry import CorruptEntry, Entry, decode
from ..fsmode import write_private
from . import inline
from .entry_files import NotAnEntryFile, read_entry_file
from .eviction import LOW_WATERMARK, take_seconds
from .index import Index, IndexRow
from .layout import (
    STALE_TEMP_SECONDS,
    TEMP_PREFIX,
    aside,
    entry_file,
    entry_path,
    kind_of_file,
    read_pin,
    write_pin,
)
from .openers import alive

log = logging.getLogger("voxcache.lifecycle")

_TEMP_PID = re.compile(r"\.tmp-(?:[a-z]+-)?(\d+)-")
"""The writer's pid in a temp file name: ``.tmp-<pid>-…`` (``.tmp-ready-<pid>-…`` too)."""
BATCH = 256
VICTIMS = "pinned = 0"
"""Where victims come from, lowest score first (``tiers.eviction``), whatever their kind:
the score already weighs what an entry cost against the room it takes, so a delivery
encoding that is cheap to derive again goes early and a small embedding that took a second
goes late. Served by the ``(pinned, score)`` index: a batch costs a few index steps."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps for the disk tier; ``None`` means unbounded."""

    max_bytes: int | None = None
    max_entries: int | None = None
    low_watermark: float = LOW_WATERMARK
    """After crossing a cap, evict down to this fraction of it (so we do not evict on
    every write)."""


def enforce(root: Path, index: Index, limits: Limits, now: float | None = None) -> dict[str, int]:
    """Drop expired entries, then evict by score until under the caps; return counts by reason."""
    now = time.time() if now is None else now
    evicted = {"expired": 0, "size": 0, "count": 0}
    _unpin_lapsed(root, index, now)
    expired = index.rows("expires IS NOT NULL AND expires <= ?", (now,), order="expires")
    evicted["expired"] = _drop(root, index, expired, still_expired_at=now)
    total_bytes, total_entries = index.totals()
    if limits.max_bytes is not None and total_bytes > limits.max_bytes:
        evicted["size"] = _evict_down(root, index, "size", limits.max_bytes,
                                      int(limits.max_bytes * limits.low_watermark))
    total_bytes, total_entries = index.totals()
    if limits.max_entries is not None and total_entries > limits.max_entries:
        evicted["count"] = _evict_down(root, index, "count", limits.max_entries,
                                       int(limits.max_entries * limits.low_watermark))
    index.add_counters({f"evictions_{k}": v for k, v in evicted.items() if v})
    return evicted


def _evict_down(root: Path, index: Index, reason: str, cap: int, target: int) -> int:
    """Evict lowest-score unpinned entries until the measure drops to ``target``.

    This is also where admission is decided: it runs in the write that crossed the cap,
    and a take on probation (``tiers.eviction``) is usually its first victim — written,
    served and kept in memory, but not kept on disk."""
    dropped = 0
    while True:
        total_bytes, total_entries = index.totals()
        current = total_bytes if reason == "size" else total_entries
        if current <= target:
            return dropped
        victims = index.rows(VICTIMS, order="score", limit=BATCH)
        if not victims:
            log.warning("disk tier is over its %s cap but every entry is pinned", reason)
            return dropped
        excess = current - target
        chosen: list[IndexRow] = []
        for row in victims:
            chosen.append(row)
            excess -= row.size if reason == "size" else 1
            if excess <= 0:
                break
        dropped += _drop(root, index, chosen, evicting=(cap, reason == "size"))


def _unpin_lapsed(root: Path, index: Index, now: float) -> None:
    """Pins with an end time that has passed become ordinary entries again."""
    lapsed = index.rows("pinned = 1 AND pin_until IS NOT NULL AND pin_until <= ?", (now,))
    for row in lapsed:
        index.set_pin(row.key, False)
        write_pin(root, row.key, False, None)


def _drop(root: Path, index: Index, rows: list[IndexRow],
          still_expired_at: float | None = None,
          evicting: tuple[int, bool] | None = None) -> int:
    """Delete rows and, under the same write lock, the entries of the rows that were
    really deleted (a folder walk confirms an entry under that lock before indexing it,
    so it never sees the entry of a row dropped here).

    With ``still_expired_at`` a row goes only if its take is still expired: a writer may
    have re-rendered the key meanwhile (a newer row), and its fresh file must stay.
    With ``evicting`` (the cap and whether it counts bytes) the rows are victims of the
    eviction policy: they leave ghosts and advance its clock (``Index.evict``).
    """
    if not rows:
        return 0
    if evicting is not None:
        return index.evict(rows, *evicting, remove_entry=lambda row: _remove_entry(root, row))
    gone = 0
    for start in range(0, len(rows), BATCH):  # the write lock is held one batch at a time
        with index.transaction() as db:
            for row in rows[start:start + BATCH]:
                if db.execute("DELETE FROM entries WHERE key = ? AND expires <= ?",
                              (row.key, still_expired_at)).rowcount:
                    gone += 1
                    _remove_entry(root, row, still_expired_at)
    return gone


def _remove_entry(root: Path, row: IndexRow, still_expired_at: float | None = None) -> None:
    """Remove a dropped row's file or inline record (never raises: the row is gone either
    way, and a file left behind is only uncounted bytes until the next walk)."""
    path = entry_path(root, row.key, row.kind)
    if still_expired_at is None or _file_expired(path, row.key, still_expired_at):
        with contextlib.suppress(OSError):
            path.unlink()
    if inline.eligible(row.kind, row.size):  # small entries live in the inline store
        inline.drop_record(root, row.key, row.kind, still_expired_at)


def _file_expired(path: Path, key: str, now: float) -> bool:
    """True unless the file at ``path`` is a live take (a re-render raced the collector)."""
    try:
        return decode(read_entry_file(str(path)), key).header.expired(now)
    except (OSError, NotAnEntryFile, CorruptEntry):
        return True


def sweep_temp_files(root: Path, now: float | None = None) -> int:
    """Remove temp files left by crashed writers (dead pid, or older than 10 minutes),
    wherever voxcache writes them: entry temps under ``objects/``, write probes in the
    root, atomic-write temps of pins, voices and settings."""
    now = time.time() if now is None else now
    removed = 0
    for folder, _dirs, files in os.walk(root):
        if os.path.basename(folder) == "quarantine":
            continue
        for name in files:
            if not name.startswith(TEMP_PREFIX):
                continue
            path = Path(folder) / name
            with contextlib.suppress(FileNotFoundError):
                if not _writer_alive(name) or now - path.stat().st_mtime > STALE_TEMP_SECONDS:
                    path.unlink()
                    removed += 1
    return removed


def sweep_lock_files(root: Path) -> int:
    """Remove per-key lock files whose holder died (``locks/ab/<key>.lock``).

    A holder unlinks its lock file before releasing it, so a file that anyone can lock
    at once was left by a process killed while it held the key. It is unlinked while
    locked and only if the path still names it — the same rule ``key_lock`` follows —
    so a live holder or a waiter is never disturbed.
    """
    removed = 0
    for path in (root / "locks").glob("??/*.lock"):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)
                removed += 1
        except OSError:  # held (BlockingIOError), or gone meanwhile
            pass
        finally:
            os.close(fd)
    return removed


def _writer_alive(temp_name: str) -> bool:
    """Whether the process named in a temp file (``.tmp-<pid>-…``) is still running."""
    match = _TEMP_PID.match(temp_name)
    if match is None:
        return False
    pid = int(match.group(1))
    if pid == os.getpid():
        return True
    return alive(pid)


def _stored_files(root: Path) -> dict[str, Path]:
    """Map key → path for everything published under an entry name (a folder planted
    at an entry path included, so that it is quarantined rather than ignored)."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root / "objects"):
        for name in (*files, *dirs):
            if kind_of_file(name) is not None:
                found[name[:64]] = Path(folder) / name
    return found


def reconcile(root: Path, index: Index,
              progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Make the index match what is stored (files and inline records): add missing rows,
    drop rows without a stored entry.

    ``progress(done, total)`` is told how many of the unindexed entries have been verified
    (a rebuilt index verifies every entry: minutes for a large folder)."""
    # Index first, storage second: a writer publishes its file (or record) before its row,
    # so a row that appears between the two reads always has its entry in the walk.
    indexed: dict[str, str] = dict(index.query("SELECT key, kind FROM entries"))
    objects = str(root / "objects")
    files = _stored_files(root)
    with inline.opened(root) as store:
        records = _stored_records(store)

        # Both checks run under the index's write lock, so what the walk saw earlier cannot
        # undo what a writer or a remover did since: an entry removed since it was verified
        # gets no row, and a row whose entry was stored again since the listing stays.
        def still_stored(row: IndexRow) -> bool:
            if row.key in files:
                return os.path.lexists(files[row.key])
            return _has_record(store, records[row.key])

        def stored_again(key: str) -> bool:
            return entry_stored(objects, store, key, indexed[key])

        stale = set(indexed) - set(files) - set(records)
        dropped = index.remove(stale, unless=stored_again) if stale else 0
        added = quarantined = 0
        batch: list[IndexRow] = []
        unindexed = (set(files) | set(records)) - indexed.keys()
        for done, key in enumerate(unindexed):
            if progress is not None:
                progress(done, len(unindexed))
            row = (_row_of_file(root, index, key, files[key]) if key in files
                   else _row_of_record(root, index, store, key, records[key]))
            if row is None:
                quarantined += 1
                continue
            batch.append(row)
            if len(batch) >= BATCH:
                added += index.add_many(batch, stored=still_stored)
                batch = []
        added += index.add_many(batch, stored=still_stored) if batch else 0
    if progress is not None:
        progress(len(unindexed), len(unindexed))
    return {"added": added, "dropped": dropped, "quarantined": quarantined,
            "temp_removed": sweep_temp_files(root), "locks_removed": sweep_lock_files(root)}


def entry_stored(objects: str, store: inline.InlineStore | None, key: str, kind: str) -> bool:
    """Whether (key, kind) is stored now, inline or as a file under ``objects``. Asked under
    the index's write lock before a row goes in (the disk tier's writes) or a stale one goes
    out (the walk), so that neither outlives, nor forgets, what a remover or a writer did
    meanwhile (an LMDB lookup for inline kinds, an lstat)."""
    try:
        name = inline.record_name(key, kind)
    except ValueError:  # not a key voxcache wrote (a planted row): nothing is stored under it
        return False
    if kind not in inline.FILE_KINDS and _has_record(store, name):
        return True
    return os.path.lexists(entry_file(objects, key, kind))


def _has_record(store: inline.InlineStore | None, name: bytes) -> bool:
    try:
        return store is not None and store.has(name)
    except (inline.InlineDamaged, inline.InlineUnavailable):
        return False  # unreadable now: the file check or the next walk decides


def _stored_records(store: inline.InlineStore | None) -> dict[str, bytes]:
    """Key → record name of every inline entry. A damaged store is replaced by an empty one
    (its entries are gone, so are their rows); what was written since, to the store that
    replaced it, is read from there."""
    if store is None:
        return {}
    for _ in range(2):
        try:
            return {inline.key_of(name): name for name in store.names()}
        except inline.InlineDamaged as exc:
            store.replace_damaged(exc)
    return {}


def _row_of_record(root: Path, index: Index, store: inline.InlineStore | None, key: str,
                   name: bytes) -> IndexRow | None:
    """Verify one inline record and return its row; quarantine it (None) if it does not
    verify. Records keep no access time: the row counts from the take's creation."""
    blob = store.get(name) if store is not None else None
    if blob is None:
        return None  # deleted meanwhile
    try:
        entry = decode(blob, key)
    except CorruptEntry as exc:
        with contextlib.suppress(OSError):
            write_private(aside(root, f"{key}{name[32:].decode()}.inline"), blob)
        store.delete(name, lambda current: current == blob)  # type: ignore[union-attr]  # inline: open
        index.add_counters({"corruptions": 1})
        log.warning("quarantined inline entry %s while rebuilding the index: %s", key, exc)
        return None
    return _row_of(root, key, entry, entry.header.created)


def rebuild_index(root: Path, index: Index,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Rebuild the index from scratch from the files (counters are kept)."""
    with index.transaction() as db:
        db.execute("DELETE FROM entries")
    return reconcile(root, index, progress)


def _row_of_file(root: Path, index: Index, key: str, path: Path) -> IndexRow | None:
    """Verify one file and return its row; quarantine it (None) if it does not verify."""
    try:
        entry = decode(read_entry_file(str(path)), key)
        atime = os.stat(path, follow_symlinks=False).st_atime
    except (CorruptEntry, NotAnEntryFile, IsADirectoryError) as exc:
        with contextlib.suppress(OSError):
            os.replace(path, aside(root, path.name))
        index.add_counters({"corruptions": 1})
        log.warning("quarantined %s while rebuilding the index: %s", path.name, exc)
        return None
    except OSError as exc:  # unreadable now (permissions, I/O): leave it for the next check
        log.warning("could not check %s while rebuilding the index: %s", path.name, exc)
        return None
    return _row_of(root, key, entry, atime)


def _row_of(root: Path, key: str, entry: Entry, last_access: float) -> IndexRow:
    h = entry.header
    pinned, pin_until = read_pin(root, key)
    return IndexRow(
        key=key, kind=h.kind, size=entry.size, created=h.created, expires=h.expires,
        last_access=last_access, hits=0, pinned=pinned, pin_until=pin_until,
        tenant=str(h.meta.get("tenant", "")), engine=str(h.meta.get("engine", "")),
        model=str(h.meta.get("model", "")), voice=str(h.meta.get("voice") or ""),
        text=str(h.meta.get("text", ""))[:200], parent=str(h.meta.get("parent") or ""),
        cost=take_seconds(h.meta),
    )
