"""Small entries of the disk tier, stored inline in one LMDB file instead of one file each.

A 100 B–4 KB file costs more to read (open, fstat, read, close) than its bytes; an LMDB
record is a lookup in a memory map (``bench/suite/inline_candidates.py``; kept over an index
BLOB column by ``bench/probes/inline_vs_index.py``). As for files: every read verified, first
writer wins inside the write transaction, a kill leaves the record whole or absent, 0700/0600
modes. Without an fsync per write, a store from a boot that crashed, one shorter than its meta
page (SIGBUS) or damaged is set aside to ``quarantine/``. One handle per process and folder
(``acquire``/``release``). docs/internals/design.md, "Disk tier".
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import lmdb

from ..entry import CorruptEntry, decode
from ..fsmode import FILE_MODE, locked, private_dirs, write_private
from .layout import aside, suffix_of
from .openers import boot_id

log = logging.getLogger("voxcache.disk")

INLINE_MAX = 16 * 1024
"""Entries up to this size (the whole stored form) are stored inline. In
``bench/suite/inline_candidates.py`` a verified 16 KB hit takes 6.4-6.5 µs from here against
10-10.5 µs from a file. LMDB's reads and single-process writes stay faster at 100 and
500 KB too, but with four writers at 500 KB it did 0.34-0.87× the writes per second of
plain files and 0.53-1.17× the disk tier's own file path (likely cause, not profiled: a
large value takes a run of contiguous overflow pages). The line is a judgement those
figures allow, not one fitted to them."""
FILE_KINDS = frozenset({"audio"})
"""Kinds that are always files, whatever their size: a take is a standard WAV file that
nginx, a CDN origin, ``sox``, packs and ``voxcache explain`` open by its path."""
FOLDER = "inline"
MAP_SIZE = 1 << 38
"""The most the store can hold (256 GiB of address space; the file grows as it fills).
A write that does not fit goes to a file instead."""
MAX_READERS = 1024
"""Read transactions open at once across every process sharing the folder."""
BOOT_MARK = "boot"
LOCK = "inline.lock"
_DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError,
           lmdb.VersionMismatchError, lmdb.PanicError, lmdb.BadRslotError, lmdb.BadTxnError,
           lmdb.BadValsizeError, lmdb.BadDbiError, lmdb.InvalidParameterError)
"""What LMDB raises for a store it cannot trust (as opposed to full, busy or no space)."""


class InlineDamaged(Exception):
    """The store reported damage: it must be replaced, its entries are gone. ``store`` is
    the store it was seen in (the inode of its data file): a report that arrives after that
    store was replaced is about the old one."""

    def __init__(self, message: str, store: int) -> None:
        super().__init__(message)
        self.store = store


class InlineUnavailable(Exception):
    """The store cannot take this write or answer this read now (full map, no space,
    too many readers); the disk tier falls back to a file or a miss."""


def _translated(exc: lmdb.Error, store: int) -> InlineDamaged | InlineUnavailable:
    """LMDB's error as ours: damage (the store ``store`` must go) or not now."""
    if isinstance(exc, _DAMAGE):
        return InlineDamaged(str(exc), store)
    return InlineUnavailable(str(exc))


def eligible(kind: str, size: int) -> bool:
    """Whether an entry of ``kind`` and ``size`` bytes is stored inline."""
    return size <= INLINE_MAX and kind not in FILE_KINDS


def record_name(key: str, kind: str) -> bytes:
    """The record's name: the key's 32 bytes and the suffix its file would have (kinds
    that share a suffix share a name, exactly as they share a path)."""
    return bytes.fromhex(key) + suffix_of(kind).encode()


def drop_record(root: Path, key: str, kind: str, expired_at: float | None = None) -> bool:
    """Remove ``key``'s record (eviction); with ``expired_at``, only while the stored take
    is still expired then (a re-render may have replaced it meanwhile) or unreadable."""
    def still_expired(blob: bytes) -> bool:
        try:
            return decode(blob, key).header.expired(expired_at)  # type: ignore[arg-type]  # set when used
        except CorruptEntry:
            return True

    with opened(root) as store:
        if store is None:
            return False
        try:
            return store.delete(record_name(key, kind),
                                None if expired_at is None else still_expired)
        except (InlineDamaged, InlineUnavailable) as exc:
            log.warning("disk tier: could not drop %s from the inline store: %s", key, exc)
            return False


def key_of(name: bytes) -> str:
    """The key a record name holds."""
    return name[:32].hex()


class InlineStore:
    """This process's handle on one folder's store (see ``acquire``)."""

    def __init__(self, root: Path, *, distrust: bool) -> None:
        self.root = root
        self.folder = root / FOLDER
        self.refs = 0
        self.wrote = False
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._inode = 0
        self.set_aside: str | None = None
        """Why the store found at open was set aside (its entries are gone), if it was."""
        self.env = self._open(distrust)

    # -- reads and writes -------------------------------------------------------------
    def get(self, name: bytes) -> bytes | None:
        """The record's bytes (a copy), or None."""
        env, store = self._current()
        try:
            with env.begin() as txn:
                return txn.get(name)
        except lmdb.Error as exc:
            raise _translated(exc, store) from exc

    def has(self, name: bytes) -> bool:
        """Whether a record has this name (its bytes are not read)."""
        env, store = self._current()
        try:
            with env.begin(buffers=True) as txn:
                return txn.get(name) is not None
        except lmdb.Error as exc:
            raise _translated(exc, store) from exc

    def put(self, name: bytes, blob: bytes, keep: Callable[[bytes], bool]) -> str:
        """Store ``blob`` unless a record ``keep`` accepts is there: ``new``, ``replaced``
        (over one ``keep`` refused: expired or damaged) or ``exists``. One write
        transaction, so two processes writing one name cannot both win."""
        env, store = self._current(check_replaced=True)
        try:
            with env.begin(write=True) as txn:
                existing = txn.get(name)
                if existing is not None and keep(existing):
                    return "exists"
                txn.put(name, blob)
        except lmdb.Error as exc:
            raise _translated(exc, store) from exc
        self.wrote = True
        return "new" if existing is None else "replaced"

    def delete(self, name: bytes, only_if: Callable[[bytes], bool] | None = None) -> bool:
        """Remove a record (only if ``only_if`` accepts its bytes, when given); True if
        one went."""
        env, store = self._current(check_replaced=True)
        try:
            with env.begin(write=True) as txn:
                if only_if is not None:
                    current = txn.get(name)
                    if current is None or not only_if(current):
                        return False
                gone: bool = txn.delete(name)
        except lmdb.Error as exc:
            raise _translated(exc, store) from exc
        self.wrote = self.wrote or gone
        return gone

    def names(self) -> Iterator[bytes]:
        """Every record's name (for the start-up walk), from one snapshot."""
        env, store = self._current()
        try:
            with env.begin() as txn:
                yield from txn.cursor().iternext(keys=True, values=False)
        except lmdb.Error as exc:
            raise _translated(exc, store) from exc

    def _current(self, check_replaced: bool = False) -> tuple[lmdb.Environment, int]:
        """The store to use and its identity (the inode its damage reports name)."""
        self._env(check_replaced)
        with self._lock:
            return self.env, self._inode

    # -- upkeep ------------------------------------------------------------------------
    def maintain(self) -> None:
        """Free reader slots of dead processes and follow a store another process
        replaced (called by the disk tier's flusher)."""
        try:
            self._env(check_replaced=True).reader_check()
        except lmdb.Error as exc:
            raise InlineUnavailable(str(exc)) from exc

    def replace_damaged(self, damage: InlineDamaged) -> None:
        """Move the damaged store aside and start an empty one, unless it was replaced since
        the damage was seen, by another process or by this one: a report from a transaction
        begun on the old store must not set aside the new one (and what was written to it)."""
        try:
            with self._lock, _folder_lock(self.root):
                if damage.store == self._inode == _inode_of(self.folder):
                    _set_aside(self.root, f"damaged: {damage}")
                if self._inode != _inode_of(self.folder):
                    self._reopen(distrust=False, locked=True)
        except lmdb.Error as exc:
            raise InlineUnavailable(str(exc)) from exc

    def sync(self) -> None:
        """Flush what this process wrote to the disk (once, at a clean close)."""
        if self.wrote:
            with contextlib.suppress(lmdb.Error):
                self._env().sync(True)
            self.wrote = False

    # -- opening -----------------------------------------------------------------------
    def _env(self, check_replaced: bool = False) -> lmdb.Environment:
        if self._pid != os.getpid() or (check_replaced and self._replaced()):
            with self._lock:
                if self._pid != os.getpid():  # a forked child: never touch the parent's
                    _INHERITED.append(self.env)
                    self._pid = os.getpid()
                    self._reopen(distrust=False)
                elif self._replaced():  # asked again: another thread may have followed it
                    self._reopen(distrust=False)
        return self.env

    def _replaced(self) -> bool:
        return _inode_of(self.folder) != self._inode

    def _reopen(self, distrust: bool, locked: bool = False) -> None:
        old = self.env
        self.env = self._open(distrust, locked)
        if old is not None and old not in _INHERITED:
            with contextlib.suppress(lmdb.Error):
                old.close()

    def _open(self, distrust: bool, locked: bool = False) -> lmdb.Environment:
        """Open the store, first setting aside one that must not be read (damaged, from
        a boot that ended in a crash, not what voxcache makes). ``locked``: the caller
        holds the folder lock (a flock is per open file: taking it twice would deadlock)."""
        with contextlib.nullcontext() if locked else _folder_lock(self.root):
            problem = _unsafe(self.folder, distrust)
            if problem is not None:
                _set_aside(self.root, problem)
                self.set_aside = problem
            private_dirs(self.folder)
            try:
                env = _open_env(self.folder)
            except _DAMAGE as exc:  # not an LMDB file, or one of another version
                _set_aside(self.root, f"unreadable: {exc}")
                self.set_aside = str(exc)
                private_dirs(self.folder)
                env = _open_env(self.folder)
            short = _shorter_than_its_pages(self.folder, env)
            if short is not None:
                env.close()
                _set_aside(self.root, short)
                self.set_aside = short
                private_dirs(self.folder)
                env = _open_env(self.folder)
            with contextlib.suppress(lmdb.Error):
                env.reader_check()
            mark = self.folder / BOOT_MARK
            if _read_small(mark) != _boot():
                write_private(mark, _boot().encode())
            self._inode = _inode_of(self.folder)
            return env

    def close(self) -> None:
        self.sync()
        if self._pid == os.getpid():
            with contextlib.suppress(lmdb.Error):
                self.env.close()


_OPEN: dict[tuple[str, int], InlineStore] = {}
_OPEN_LOCK = threading.Lock()
_INHERITED: list[lmdb.Environment] = []
"""A parent's handles in a forked child: kept, never used or closed (LMDB's rule)."""


def acquire(root: Path, *, distrust: bool = False) -> InlineStore | None:
    """This process's handle on ``root``'s store, opened on first use; None when the store
    cannot be opened (a read-only or full folder): the disk tier then uses files only.

    ``distrust``: the machine went down with the folder in use (``sessions``); a store
    written in that boot is set aside."""
    ident = (os.path.realpath(root), os.getpid())
    with _OPEN_LOCK:
        store = _OPEN.get(ident)
        if store is None:
            try:
                store = InlineStore(Path(root), distrust=distrust)
            except (OSError, lmdb.Error) as exc:
                log.warning("disk tier: the inline store in %s cannot be opened (%s); small "
                            "entries are stored as files", root, exc)
                return None
            _OPEN[ident] = store
        store.refs += 1
        return store


def release(store: InlineStore) -> None:
    """Give back a handle from ``acquire``; the last one closes the store (syncing what
    this process wrote)."""
    with _OPEN_LOCK:  # closed before another thread can open it again (LMDB: once a process)
        store.refs -= 1
        if store.refs > 0:
            return
        _OPEN.pop((os.path.realpath(store.root), os.getpid()), None)
        store.close()


@contextlib.contextmanager
def opened(root: Path) -> Iterator[InlineStore | None]:
    """A handle for the length of a maintenance pass (``lifecycle``)."""
    store = acquire(root)
    try:
        yield store
    finally:
        if store is not None:
            release(store)


def _open_env(folder: Path) -> lmdb.Environment:
    return lmdb.open(str(folder), map_size=MAP_SIZE, subdir=True, mode=FILE_MODE,
                     sync=False, metasync=False, readahead=False, meminit=False,
                     max_readers=MAX_READERS, max_dbs=0, lock=True)


def _unsafe(folder: Path, distrust: bool) -> str | None:
    """Why the store at ``folder`` must be set aside before it is opened, if it must."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder at inline/"
    for name in ("data.mdb", "lock.mdb"):
        try:
            member = os.lstat(folder / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(member.st_mode):
            return f"{name} is not a regular file"
    if (distrust and os.path.exists(folder / "data.mdb")
            and _read_small(folder / BOOT_MARK) != _boot()):
        return "written in a boot that ended with the folder in use (no fsync)"
    return None


def _shorter_than_its_pages(folder: Path, env: lmdb.Environment) -> str | None:
    """A data file shorter than the pages its meta page counts: reading would fault."""
    used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    size = os.stat(folder / "data.mdb").st_size
    return f"data.mdb holds {size} bytes, its pages need {used}" if size < used else None


def _set_aside(root: Path, reason: str) -> None:
    """Move the store to ``quarantine/`` for inspection."""
    dest = aside(root, FOLDER)
    private_dirs(dest.parent)
    os.replace(root / FOLDER, dest)
    log.warning("disk tier: the inline store was set aside (%s); its entries will be "
                "rendered again", reason)


def _folder_lock(root: Path) -> contextlib.AbstractContextManager[None]:
    """Opening and setting aside the store, one process at a time."""
    return locked(root / "locks" / LOCK)


def _inode_of(folder: Path) -> int:
    try:
        return os.stat(folder / "data.mdb", follow_symlinks=False).st_ino
    except OSError:
        return -1


def _read_small(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, 256).decode(errors="replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def _boot() -> str:
    return boot_id()
