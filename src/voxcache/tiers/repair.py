"""Rebuilding a damaged index from the files while the cache keeps serving.

The index is an accelerator: every hit goes from key to file without it, so a
damaged page ("database disk image is malformed") must cost nothing but the
bookkeeping. The process that meets the damage rebuilds a new index from the
files into a private temp file, then swaps it in. Several processes share one
index, so the swap is careful:

- one rebuild at a time per folder (``locks/index-rebuild.lock``); a process that
  gets the lock after another's rebuild finds a healthy index and just reopens;
- the swap itself holds ``locks/index.lock`` exclusively, which every connection
  takes shared while it opens the files (``Index._opening``): the damaged database
  and its ``-wal``/``-shm`` move to ``quarantine/`` together and the new file takes
  their place, so no connection can ever pair the new database with the old log;
- processes still connected to the old file notice that the path names another
  file (``Index.replaced_on_disk``, checked by each disk tier's flusher) and reopen.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

from ..fsmode import locked
from .index import Index
from .lifecycle import rebuild_index

log = logging.getLogger("voxcache.disk")

REBUILD_LOCK = "index-rebuild.lock"
OPEN_LOCK = "index.lock"


def rebuild_damaged(root: Path, index: Index) -> dict[str, int] | None:
    """Replace a damaged index with one rebuilt from the files; None if it was healthy.

    Safe to call from several processes at once: the first rebuilds, the others find
    a healthy index when their turn comes and only reopen.
    """
    with locked(root / "locks" / REBUILD_LOCK):
        if index.healthy():
            index.reopen()
            return None
        temp = Path(f"{index.path}.rebuild-{os.getpid()}")
        _unlink_database(temp)
        fresh = Index(temp)
        try:
            fresh.add_counters(_salvage_counters(index.path))
            fresh.carry_over(index.path)  # purged keys, pack sequences: not in the files
            report = rebuild_index(root, fresh)
        finally:
            fresh.close()
        _swap(root, Path(index.path), temp)
        index.reopen()
    log.warning("disk tier: the damaged index was rebuilt from the files: %s", report)
    return report


def _swap(root: Path, path: Path, rebuilt: Path) -> None:
    """Move the damaged database and its WAL files aside and put ``rebuilt`` in place."""
    stamp = f"{int(time.time())}-{os.getpid()}"
    with locked(root / "locks" / OPEN_LOCK):
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{suffix}",
                           root / "quarantine" / f"{path.name}.{stamp}{suffix}")
        os.replace(rebuilt, path)
    _unlink_database(rebuilt)  # its -wal/-shm, if closing left any


def _salvage_counters(path: str | os.PathLike[str]) -> dict[str, int]:
    """The persisted counters of a damaged index, when its counters table still reads."""
    try:
        with contextlib.closing(sqlite3.connect(
                Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=1)) as db:
            rows = db.execute("SELECT name, value FROM counters").fetchall()
    except sqlite3.DatabaseError:
        return {}
    return {name: int(value) for name, value in rows
            if name not in ("disk_bytes", "disk_entries") and isinstance(value, int)}


def _unlink_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
