"""One file-mode policy for everything voxcache creates: folders 0700, files 0600.

A cache folder holds other people's voices and words, so nothing in it is for
anyone but the account that runs voxcache. Python's defaults do not give that:
``Path.mkdir(mode, parents=True)`` creates the *parents* with the umask's mode
(usually 0755), ``write_text`` makes 0644 files, and SQLite creates its
database, ``-wal`` and ``-shm`` files 0644. Every place that creates a file or
folder goes through this module instead; a test walks a used cache folder
under umask 022 and finds nothing wider.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def private_dirs(path: Path | str) -> None:
    """``mkdir -p`` in which every folder it creates is 0700 (parents included)."""
    missing: list[str] = []
    current = os.fspath(path)
    while current and not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, DIR_MODE)  # the umask can only take bits away from 0700


def write_private(path: Path | str, data: bytes) -> None:
    """Write ``data`` atomically (temp file + rename) as a 0600 file."""
    target = os.fspath(path)
    folder, name = os.path.split(target)
    # ".tmp-<pid>-…": the start-up sweep removes it if this process dies mid-write
    temp = os.path.join(folder, f".tmp-{os.getpid()}-{secrets.token_hex(4)}-{name}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def private_sqlite(path: Path | str) -> None:
    """Make sure an SQLite database file exists as 0600 before SQLite opens it.

    SQLite gives a new ``-wal``/``-shm``/``-journal`` file the permissions of the
    database file itself, so creating the database 0600 first keeps all of them
    private. Files left wider by older versions are tightened. An existing database is
    never opened here: closing a descriptor drops every POSIX lock this process holds on
    the file, those of its SQLite connections included.
    """
    base = os.fspath(path)
    if not os.path.lexists(base):
        with contextlib.suppress(FileExistsError):
            os.close(os.open(base, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             FILE_MODE))
    for suffix in SQLITE_SUFFIXES:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            if os.stat(base + suffix).st_mode & 0o077:
                os.chmod(base + suffix, FILE_MODE)


@contextlib.contextmanager
def locked(path: Path | str, operation: int = fcntl.LOCK_EX, wait: float | None = None,
           poll: float = 0.05) -> Iterator[None]:
    """Hold ``flock(operation)`` on a lock file for the duration (the kernel drops it if the
    process dies). The file is made 0600 in 0700 folders; a symlink planted at its path is
    refused (``ELOOP``), never followed. With ``wait``, give up after that many seconds
    with ``TimeoutError``."""
    target = os.fspath(path)
    private_dirs(os.path.dirname(target))
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    try:
        if wait is None:
            fcntl.flock(fd, operation)
        else:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, operation | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{target} stayed locked for {wait:g} s") from None
                    time.sleep(poll)
        yield
    finally:
        os.close(fd)
