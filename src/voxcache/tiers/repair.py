"""Opening the index, and rebuilding it from what is stored while the cache keeps serving.

Anything at the index's path that is not a sound index goes to ``quarantine/`` and a new
index takes its place marked as rebuilding (O(1) at open); a background walk
(``lifecycle.reconcile``) fills it while hits and misses go on. One rebuild per folder
(``locks/index-rebuild.lock``, taken over if its holder died); the new file is renamed in
under ``locks/index.lock`` only if the path still names the damaged file; processes on the
old file follow at their next statement. docs/internals/design.md and reliability.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import sqlite3
import stat
import time
from pathlib import Path

from ..errors import CacheDirError
from ..fsmode import locked
from .index import Index, Salvage, is_damaged, salvage
from .index_file import MISSING, Identity, connecting, identity_of, opened, problem_of
from .layout import TEMP_PREFIX, aside
from .lifecycle import reconcile

log = logging.getLogger("voxcache.disk")

INDEX_NAME = "index.sqlite3"
REBUILD_LOCK = "index-rebuild.lock"
OPEN_LOCK = "index.lock"


def open_index(root: Path, new_folder: bool) -> Index:
    """Open the folder's index without waiting for a rebuild: whatever is at its path that
    is not a sound index (nothing at all, unless the folder is new) is replaced first by
    a new index marked for a rebuild, and an index created here in a folder that is not
    new is marked too. The caller starts the rebuild (``rebuild_damaged``) when
    ``Index.rebuilding``. A full disk gives a private in-memory index; a file SQLite
    cannot open for another reason (permissions, locked) is a ``CacheDirError`` — it may
    be fine, so it is never moved."""
    path = root / INDEX_NAME
    for _attempt in range(3):
        problem = problem_of(path)
        judged = identity_of(path)
        try:
            if problem is not None and not (problem == MISSING and new_folder):
                replace_index(root, path, judged, problem)
                judged = identity_of(path)
            index = Index(path, mark_new=not new_folder)
            index.query("SELECT 1 FROM entries LIMIT 1")
            return index
        except OSError as exc:
            return _in_memory(root, exc)
        except sqlite3.OperationalError as exc:
            if not is_damaged(exc):
                # Locked, full or unwritable: the file may be fine, so never move it here.
                if shutil.disk_usage(root).free > 1 << 20:
                    raise CacheDirError(f"cache index {path} cannot be opened: {exc}. Fix "
                                        "the folder's permissions or choose another "
                                        "--cache-dir.") from None
                return _in_memory(root, exc)
            replace_index(root, path, judged, str(exc))
        except sqlite3.DatabaseError as exc:
            replace_index(root, path, judged, str(exc))
    raise CacheDirError(f"cache index {path} is damaged again each time it is set up; "
                        "check the disk, or choose another --cache-dir")


def rebuild_damaged(root: Path, index: Index, check_pages: bool = True,
            known: tuple[Identity | None, str] | None = None) -> dict[str, int] | None:
    """Make ``index`` hold a row for every stored entry, whatever happened to its file;
    None when there was nothing to do. Blocks while another process rebuilds.

    Under the rebuild lock: a file that is not a sound index (``check_pages``: its pages
    too; ``known``: the identity of a file the caller found unsound, and why) is replaced
    by a new marked one; then a marked index is walked in place and the mark cleared. A
    sound, unmarked index (another process rebuilt it meanwhile) is only reopened."""
    path = Path(index.path)
    with locked(root / "locks" / REBUILD_LOCK):
        judged = identity_of(path)
        if known is not None and known[0] == judged:
            problem: str | None = known[1]
        else:
            problem = index.problem(pages=check_pages)
        if problem is not None:
            replace_index(root, path, judged, problem, index.kept)
        index.reopen()
        if not index.rebuilding():
            return None
        started = time.monotonic()
        report = reconcile(root, index)
        index.mark_rebuilding(False)
    log.warning("disk tier: the index was rebuilt from what is stored in %.1f s (%s): %s",
                time.monotonic() - started, problem or "a new index", report)
    return report


def replace_index(root: Path, path: Path, judged: Identity | None, problem: str,
                  kept: Salvage | None = None) -> None:
    """Put a new index, marked for a rebuild, in place of the file judged unsound
    (``judged``: its identity then, None for none); that file and its ``-wal``/``-shm``
    are kept in ``quarantine/``. The new one is made under a temp name, with what the
    files cannot say — counters, purged keys, pack sequences — carried over from the old
    file where it still reads, then from ``kept`` (read by a running process through its
    connection to the file it left: ``Index.kept``), and renamed over the old one, so the
    path never names a database without its tables, nor (but for a folder) nothing.
    Nothing moves if a sound file other than the judged one is there by then: another
    process replaced it first."""
    log.warning("disk tier: index %s: %s; a new one takes its place and is rebuilt from what "
                "is stored in the background", path, problem)
    temp = root / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{path.name}"
    fresh = Index(temp, mark_new=True)
    try:
        fresh.carry_over(_salvaged(path), kept or {})
    finally:
        fresh.close()
    spare = aside(root, path.name)
    try:
        with locked(root / "locks" / OPEN_LOCK):
            if identity_of(path) != judged and problem_of(path) is None:
                return
            with contextlib.suppress(FileNotFoundError):
                try:
                    os.link(path, spare, follow_symlinks=False)  # the path goes on naming it
                except OSError:
                    os.replace(path, spare)  # a folder: it cannot be linked, nor replaced
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{path}{suffix}", f"{spare}{suffix}")
            os.replace(temp, path)
    finally:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{temp}{suffix}")


def _salvaged(path: Path) -> Salvage:
    """What still reads of the ``SALVAGED`` tables of the file at ``path`` — a regular file
    only (never through a symlink), opened as every connection opens (``locks/index.lock``
    shared, so with its own log)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return {}
        uri = f"{Path(os.path.abspath(path)).as_uri()}?mode=ro"
        with locked(path.parent / "locks" / OPEN_LOCK, fcntl.LOCK_SH), connecting(), \
                contextlib.closing(sqlite3.connect(uri, uri=True, timeout=1)) as db:
            opened(identity_of(path))
            return salvage(db)
    except (OSError, sqlite3.Error):
        return {}


def _in_memory(root: Path, exc: BaseException) -> Index:
    log.warning("disk tier: %s is full, so the index cannot be opened (%s); hits are "
                "served, new takes are not cached until space is freed", root, exc)
    return Index.in_memory()
