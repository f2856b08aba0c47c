"""Local disk tier: one standard file per entry, sharded ``objects/ab/cd/<key>.wav``.

Why it cannot serve a torn entry: a write goes to a temp file in the target
folder and is published with ``link`` (atomic, and fails if the name exists —
first writer wins); the reader verifies the envelope checksum, so even a file
truncated by a power cut after publication is detected, quarantined and read
as a miss. A hit never touches SQLite: the path follows from the key, and the
access is recorded in a batch that a background thread flushes.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..entry import CorruptEntry, Entry, decode
from ..errors import CacheDirError
from .index import Index, IndexRow
from .layout import SUBFOLDERS, TEMP_PREFIX, entry_path, write_pin
from .lifecycle import rebuild_index, reconcile

log = logging.getLogger("voxcache.disk")

NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs"}


class DiskTier:
    """Files plus an SQLite index; eviction and reconciliation live in ``lifecycle``."""

    name = "disk"

    def __init__(self, root: Path, *, flush_interval: float = 2.0, check_at_start: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self._clock = clock
        _prepare_root(self.root)
        warn_if_network_filesystem(self.root)
        self.index = _open_index(self.root)
        self._objects = str(self.root / "objects")
        self._pending: dict[str, tuple[int, float]] = {}
        self._counters: dict[str, int] = {}
        self._pending_lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, args=(flush_interval,),
                                         name="voxcache-disk-flush", daemon=True)
        self._flusher.start()
        self.startup_check: threading.Thread | None = None
        if check_at_start:
            self.startup_check = threading.Thread(target=self._check_at_start,
                                                  name="voxcache-disk-check", daemon=True)
            self.startup_check.start()

    def _check_at_start(self) -> None:
        """Sweep crash-left temp files and reconcile the index with the files, off the
        request path (a million-entry folder takes seconds to walk)."""
        try:
            report = reconcile(self.root, self.index)
        except Exception as exc:  # never take the process down over an accelerator
            log.warning("disk tier: start-up check failed: %s", exc)
            return
        if any(report.values()):
            log.warning("disk tier: start-up check repaired the index: %s", report)

    # -- reads -------------------------------------------------------------
    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """Return the verified, unexpired entry, or None (corrupt files are quarantined)."""
        # String formatting, not Path joins: this is the disk-hit path (see layout.entry_path).
        suffix = ".wav" if kind == "audio" else ".vxc"
        path = f"{self._objects}/{key[:2]}/{key[2:4]}/{key}{suffix}"
        try:
            blob = _read_file(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("disk tier: cannot read %s (%s); treating as a miss", path, exc)
            return None
        try:
            entry = decode(blob, key)
        except CorruptEntry as exc:
            self.quarantine(key, kind, str(exc))
            return None
        now = self._clock()
        if entry.header.expired(now):
            return None
        with self._pending_lock:
            hits, _ = self._pending.get(key, (0, 0.0))
            self._pending[key] = (hits + 1, now)
        return entry

    def path_of(self, key: str, kind: str = "audio") -> Path:
        """Return the file path an entry would have (it may not exist)."""
        return entry_path(self.root, key, kind)

    # -- writes ------------------------------------------------------------
    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> bool:
        """Publish an entry; False if it could not be written (disk full, I/O error)."""
        header = entry.header
        path = entry_path(self.root, header.key, header.kind)
        try:
            published = _publish(path, entry.blob)
        except OSError as exc:
            log.warning("disk tier: could not store %s (%s); served without caching",
                        header.key, exc)
            self.count("write_errors")
            return False
        meta = header.meta
        now = self._clock()
        self.index.add(IndexRow(
            key=header.key, kind=header.kind, size=entry.size, created=header.created,
            expires=header.expires, last_access=now, hits=0, pinned=pinned, pin_until=pin_until,
            tenant=tenant or str(meta.get("tenant", "")), engine=str(meta.get("engine", "")),
            model=str(meta.get("model", "")), voice=str(meta.get("voice") or ""),
            text=str(meta.get("text", ""))[:200],
        ))
        return published

    def pin(self, key: str, pinned: bool = True, until: float | None = None) -> bool:
        """Pin (never evict, optionally until a time) or unpin; False if not stored."""
        if not self.index.set_pin(key, pinned, until):
            return False
        write_pin(self.root, key, pinned, until)
        return True

    def delete(self, key: str, kind: str = "audio") -> bool:
        """Remove an entry's row, then its file (row first: a reader may still hit the file)."""
        self.index.remove([key])
        write_pin(self.root, key, False, None)
        try:
            entry_path(self.root, key, kind).unlink()
            return True
        except FileNotFoundError:
            return False

    def quarantine(self, key: str, kind: str, reason: str) -> None:
        """Move a bad file aside for inspection, drop its row and count it."""
        src = entry_path(self.root, key, kind)
        dest = self.root / "quarantine" / f"{src.name}.{int(self._clock())}"
        with contextlib.suppress(FileNotFoundError):
            os.replace(src, dest)
            log.warning("disk tier: quarantined %s: %s", key, reason)
        self.index.remove([key])
        self.count("corruptions")

    # -- bookkeeping ---------------------------------------------------------
    def count(self, name: str, delta: int = 1) -> None:
        """Add to a persisted counter (written with the next flush)."""
        with self._pending_lock:
            self._counters[name] = self._counters.get(name, 0) + delta

    def flush(self) -> None:
        """Write batched accesses and counters to the index."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            counters, self._counters = self._counters, {}
        try:
            if pending:
                self.index.record_access(pending)
            self.index.add_counters(counters)
        except Exception as exc:  # the index is an accelerator: never fail a request on it
            log.warning("disk tier: index flush failed (%s); will retry", exc)
            with self._pending_lock:
                for name, delta in counters.items():
                    self._counters[name] = self._counters.get(name, 0) + delta

    def _flush_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.flush()

    def close(self) -> None:
        """Flush and stop the background flusher."""
        self._stop.set()
        self._flusher.join(timeout=5)
        if self.startup_check is not None:
            self.startup_check.join(timeout=30)
        self.flush()
        self.index.close()


def _read_file(path: str) -> bytes:
    """Read a whole file with one read call (skips the buffered-io layer on the hit path)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size)
        while len(data) < size:  # a short read (signal, odd filesystem): keep going
            more = os.read(fd, size - len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)


def _publish(path: Path, blob: bytes) -> bool:
    """Write to a temp file beside ``path`` and link it into place; False if it existed."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.parent / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def _prepare_root(root: Path) -> None:
    """Create the cache folders (0700) and prove we can write there."""
    try:
        for sub in SUBFOLDERS:
            (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        probe = root / f"{TEMP_PREFIX}probe-{os.getpid()}"
        try:
            probe.write_bytes(b"ok")
        finally:
            probe.unlink(missing_ok=True)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            # Full, not broken: render anyway; each take says it was not stored.
            log.warning("disk tier: %s is full; takes are served but not cached until "
                        "space is freed", root)
            return
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise CacheDirError(
            f"cache folder {root} is not usable: {reason}. Choose another with "
            "--cache-dir or VOXCACHE_DIR, or fix its permissions."
        ) from None


def _open_index(root: Path) -> Index:
    """Open the index, rebuilding it from the files when it is missing or unreadable."""
    import sqlite3

    path = root / "index.sqlite3"
    existed = path.exists()
    try:
        index = Index(path)
        index.query("SELECT count(*) FROM entries")
    except sqlite3.OperationalError as exc:
        # Locked, full or unwritable: the file may be fine, so never delete it here.
        if shutil.disk_usage(root).free > 1 << 20:
            raise CacheDirError(f"cache index {path} cannot be opened: {exc}. Fix the "
                                "folder's permissions or choose another --cache-dir.") from None
        log.warning("disk tier: %s is full, so the index cannot be opened (%s); hits are "
                    "served, new takes are not cached until space is freed", root, exc)
        return Index.in_memory()
    except sqlite3.DatabaseError as exc:
        log.warning("disk tier: index %s unreadable (%s); rebuilding from the files", path, exc)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")
        index = Index(path)
        existed = False
    if not existed:
        rebuild_index(root, index)
    return index


def warn_if_network_filesystem(root: Path, mounts: str = "/proc/mounts") -> str | None:
    """Log a loud warning when the cache is on NFS/SMB (flock and rename are unreliable)."""
    fstype = filesystem_type(root, mounts)
    if fstype in NETWORK_FILESYSTEMS:
        log.warning(
            "!!! cache folder %s is on a network filesystem (%s): file locks and atomic "
            "renames are not reliable there, so single-flight across machines and crash "
            "safety are weakened. Use a local disk and the shared Redis/S3 tier instead.",
            root, fstype)
    return fstype


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
