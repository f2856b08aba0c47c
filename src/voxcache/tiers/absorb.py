"""Moving a folder's old store files into the index database, in place and once.

Before one database held everything, the cache folder kept ``aliases.sqlite3``,
``usage.sqlite3`` and ``history.sqlite3`` beside the index. Their rows move into the
index's tables (``index_schema.FOLDER_TABLES``) in one transaction that also records
the old file's identity in ``absorbed``; the file goes only after that commits, and a
file whose identity is recorded is only removed. A process killed at any point leaves
every row in one place or the other, never lost and never counted twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

from ..fsmode import locked
from .index import Index, is_damaged
from .index_db import read_write_uri
from .index_file import MISSING, connecting, identity_of, opened, problem_of
from .layout import aside_stamp

log = logging.getLogger("voxcache.disk")

ABSORB_WAIT = 1.0
"""Seconds the move waits for another process's write lock before it is left for later."""
ABSORB_LOCK = "absorb.lock"

OLD_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    "aliases.sqlite3": (("aliases", "INSERT INTO aliases VALUES (?,?,?,?) ON CONFLICT(lineage) "
                         "DO UPDATE SET key = excluded.key, model = excluded.model, updated = "
                         "excluded.updated WHERE excluded.updated > aliases.updated"),),
    "usage.sqlite3": (("usage", "INSERT INTO usage VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON "
                       "CONFLICT(key) DO UPDATE SET asked = asked + excluded.asked, missed = "
                       "missed + excluded.missed, last = max(last, excluded.last)"),),
    "history.sqlite3": (
        ("workers", "INSERT OR IGNORE INTO history_workers VALUES (?,?,?,?)"),
        ("totals", "INSERT INTO history_totals VALUES (?,?,?) ON CONFLICT(worker, sample) "
                   "DO UPDATE SET value = value + excluded.value"),
        ("deltas", "INSERT INTO history_deltas VALUES (?,?,?) ON CONFLICT(bucket, sample) "
                   "DO UPDATE SET value = value + excluded.value"),
        ("levels", "INSERT OR IGNORE INTO history_levels VALUES (?,?,?,?)")),
}
"""Each old file: its tables, and the statement that merges a row of each into the index
(aliases: the newer wins; counts add up)."""


def old_stores(root: Path) -> list[str]:
    """The old store files (or anything at their names) still in the folder."""
    return [name for name in OLD_FILES if any(
        os.path.lexists(root / f"{name}{suffix}") for suffix in ("", "-wal", "-shm"))]


def absorb_old_stores(root: Path, index: Index, wait: float = ABSORB_WAIT) -> bool:
    """Move every old store file's rows into ``index``; True when none is left.

    One process at a time per folder (``locks/absorb.lock``). An index error (locked
    longer than ``wait``, damaged) is raised with the old files untouched, for the caller
    to count and try again; an old file that cannot be removed (a read-only folder) is
    left with its identity recorded, and only removed next time."""
    if not old_stores(root):
        return True
    failed: BaseException | None = None
    with locked(root / "locks" / ABSORB_LOCK):
        for name, tables in OLD_FILES.items():
            try:
                _absorb(root, index, name, tables, wait)
            except (OSError, sqlite3.Error) as exc:  # the others still move
                failed = failed or exc
    if failed is not None:
        raise failed
    return not old_stores(root)


def _absorb(root: Path, index: Index, name: str, tables: tuple[tuple[str, str], ...],
            wait: float) -> None:
    path = root / name
    problem = problem_of(path)
    if problem == MISSING:
        return
    if problem is not None:  # a symlink, a folder, garbage: never opened, never followed
        _set_aside(root, path, problem)
        return
    identity = identity_of(path)
    mark = f"{identity[0]}:{identity[1]}" if identity else ""
    rows, whole = _read(path, tables)
    with index.transaction(wait) as db:
        seen = db.execute("SELECT file FROM absorbed WHERE name = ?", (name,)).fetchone()
        if seen is None or seen[0] != mark:
            for table, merge in tables:
                db.executemany(merge, rows.get(table, ()))
            db.execute("INSERT OR REPLACE INTO absorbed VALUES (?, ?)", (name, mark))
    moved = sum(len(found) for found in rows.values())
    if whole:
        for suffix in ("-wal", "-shm", ""):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")
        log.info("disk tier: %s absorbed into the index (%d rows)", name, moved)
    else:
        _set_aside(root, path, f"not every table read ({moved} rows moved)")
    with index.transaction(wait) as db:
        db.execute("DELETE FROM absorbed WHERE name = ?", (name,))


class OldStoreUnreadable(OSError):
    """An old store file cannot be read now (permissions, locked): left for a later try."""


def _read(path: Path, tables: tuple[tuple[str, str], ...]
          ) -> tuple[dict[str, list[tuple[Any, ...]]], bool]:
    """The rows of each table that reads whole (with the columns its merge expects), and
    whether every table did. Damage of the old file stays here (it is not the index's);
    a file that cannot be read now raises ``OldStoreUnreadable``, so nothing is recorded."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    whole = True
    try:
        with connecting():
            db = sqlite3.connect(read_write_uri(path), uri=True, timeout=1.0)
            opened(identity_of(path))
    except sqlite3.Error as exc:
        raise OldStoreUnreadable(f"{path.name} cannot be opened: {exc}") from exc
    with contextlib.closing(db):
        for table, merge in tables:
            try:
                rows = db.execute(f"SELECT * FROM {table}").fetchall()
            except sqlite3.Error as exc:
                if not (is_damaged(exc) or "no such table" in str(exc)):
                    raise OldStoreUnreadable(f"{path.name} cannot be read: {exc}") from exc
                whole = False
                continue
            if any(len(row) != merge.count("?") for row in rows):
                whole = False
                continue
            found[table] = rows
    return found, whole


def _set_aside(root: Path, path: Path, problem: str) -> None:
    """Move what is at an old store's name (and its ``-wal``/``-shm``) to ``quarantine/``."""
    stamp = aside_stamp()
    log.warning("disk tier: %s: %s; moved to quarantine/", path.name, problem)
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", root / "quarantine" / f"{path.name}{suffix}.{stamp}")
