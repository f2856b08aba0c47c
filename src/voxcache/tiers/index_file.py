"""What is at the index's path: a sound SQLite file, or something the index must not trust.

SQLite opens a zero-length or new file as an empty database, so a lost index would be
silently short. These checks (an ``lstat`` and the 100-byte header) run when the index opens,
when a connection opens and before following a new file; damage inside pages is SQLite's to
find (``quick_check``). The header is never read from a file SQLite has open in this process
(closing any descriptor drops its POSIX locks: sqlite.org/howtocorrupt.html §2.2); opens are
recorded under the same lock. docs/internals/design.md, "Disk tier".
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

MISSING = "missing"
"""The problem of a path that names nothing: fine in a new folder, a rebuild anywhere else."""
HEADER = b"SQLite format 3\x00"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO",
          stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}

Identity = tuple[int, int]
"""(device, inode) of the file at a path: what a connection opened."""

_FILES = threading.RLock()
_OPENED: set[Identity] = set()
"""Database files SQLite has opened in this process (never read here again)."""


@contextlib.contextmanager
def connecting() -> Iterator[None]:
    """Held while a connection is opened and what it opened recorded (``opened``)."""
    with _FILES:
        yield


def opened(identity: Identity | None) -> None:
    """Record a database file SQLite opened in this process."""
    if identity is not None:
        with _FILES:
            _OPENED.add(identity)


def identity_of(path: Path | str) -> Identity | None:
    """(device, inode) of whatever is at ``path`` (a symlink's own), None when nothing is."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def problem_of(path: Path | str) -> str | None:
    """Why the file at ``path`` cannot be taken as a sound index (``MISSING`` when there is
    none); None when it can.

    A file SQLite would open as a new database is sound here — the caller then sees a
    new ``entries`` table and knows the index must be rebuilt — unless a write-ahead log
    is beside it: a new database must never be paired with another's log.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return _orphan_log(path) or MISSING
    kind = stat.S_IFMT(info.st_mode)
    if kind != stat.S_IFREG:
        return f"{_KINDS.get(kind, 'not a regular file')} is at the index's path"
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            companion = os.lstat(f"{path}{suffix}")
            if not stat.S_ISREG(companion.st_mode):
                return f"{_KINDS.get(stat.S_IFMT(companion.st_mode), 'not a file')} is at " \
                       f"its {suffix}"
    if info.st_size == 0:
        return _orphan_log(path)
    with _FILES:
        if (info.st_dev, info.st_ino) in _OPENED:
            return None  # SQLite reads it here and reports damage itself
        return _header_problem(path, info.st_size)


def _orphan_log(path: Path | str) -> str | None:
    for suffix in ("-wal", "-shm"):
        if os.path.lexists(f"{path}{suffix}"):
            return f"a {suffix} file without its database"
    return None


def _header_problem(path: Path | str, size: int) -> str | None:
    """Whether the header says SQLite and, with no write-ahead log beside it (after a
    clean close there is none), whether the file holds every page the header counts."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        return f"unreadable ({os.strerror(exc.errno or 0)})"
    try:
        header = os.read(fd, 100)
    except OSError as exc:
        return f"unreadable ({os.strerror(exc.errno or 0)})"
    finally:
        os.close(fd)
    if len(header) < 100 or not header.startswith(HEADER):
        return "not an SQLite database"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return "not an SQLite database (page size)"
    try:
        log_bytes = os.lstat(f"{path}-wal").st_size
    except FileNotFoundError:
        log_bytes = 0
    if log_bytes:  # pages may live in the log until a checkpoint: SQLite decides
        return None
    pages = int.from_bytes(header[28:32], "big")
    counted = header[24:28] == header[92:96] and pages > 0  # SQLite ≥ 3.7.0 keeps it valid
    if size % page_size or (counted and size < pages * page_size):
        return f"truncated ({size} bytes; its header counts {pages} pages of {page_size})"
    return None
