"""A folder with the old store files (aliases, usage, history beside the index) opens with
one database: every row moved into the index once, the old files gone, and nothing lost
or counted twice whatever stops the move (kill -9, a locked index, an unreadable file)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from voxcache import Cache
from voxcache.testing import forked
from voxcache.tiers.absorb import OLD_FILES
from voxcache.tiers.index_schema import FOLDER_TABLES

OLD_SCHEMAS = {
    "aliases.sqlite3": "CREATE TABLE aliases (lineage TEXT PRIMARY KEY, key TEXT NOT NULL, "
                       "model TEXT NOT NULL, updated REAL NOT NULL);",
    "usage.sqlite3": "CREATE TABLE usage (key TEXT PRIMARY KEY, kind TEXT NOT NULL, tenant "
                     "TEXT NOT NULL, engine TEXT NOT NULL, model TEXT NOT NULL, voice TEXT, "
                     "instruct TEXT, text TEXT NOT NULL, payload TEXT NOT NULL, asked INTEGER "
                     "NOT NULL, missed INTEGER NOT NULL, last REAL NOT NULL);",
    "history.sqlite3": "CREATE TABLE workers (worker TEXT PRIMARY KEY, pid INTEGER NOT NULL, "
                       "started REAL NOT NULL, seen REAL NOT NULL); CREATE TABLE totals (worker "
                       "TEXT NOT NULL, sample TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY "
                       "(worker, sample)) WITHOUT ROWID; CREATE TABLE deltas (bucket INTEGER NOT "
                       "NULL, sample TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (bucket, "
                       "sample)) WITHOUT ROWID; CREATE TABLE levels (bucket INTEGER NOT NULL, "
                       "worker TEXT NOT NULL, sample TEXT NOT NULL, value REAL NOT NULL, "
                       "PRIMARY KEY (bucket, worker, sample)) WITHOUT ROWID;",
}
ROWS = 2000


def plant_old_stores(root: Path, rows: int = ROWS) -> None:
    """The three old files as an older voxcache left them (WAL, rows in them)."""
    root.mkdir(parents=True, exist_ok=True)
    fill = {
        "aliases.sqlite3": [("aliases", [(f"l{i}", f"k{i}", "m1", 100.0 + i)
                                         for i in range(rows)])],
        "usage.sqlite3": [("usage", [(f"u{i}", "request", "", "piper", "m1", "v", None,
                                      f"text {i}", "{}", 3, 1, 50.0) for i in range(rows)])],
        "history.sqlite3": [("workers", [("w-old", 1, 1.0, 2.0)]),
                            ("totals", [("w-old", f"s{i}", 5.0) for i in range(rows)]),
                            ("deltas", [(1000, f"s{i}", 5.0) for i in range(rows)]),
                            ("levels", [(1000, "w-old", "g", 1.0)])],
    }
    for name, tables in fill.items():
        with contextlib.closing(sqlite3.connect(root / name)) as db, db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(OLD_SCHEMAS[name])
            for table, values in tables:
                marks = ",".join("?" * len(values[0]))
                db.executemany(f"INSERT INTO {table} VALUES ({marks})", values)


def figures(root: Path) -> dict[str, object]:
    """What the index holds of the absorbed stores."""
    with contextlib.closing(sqlite3.connect(root / "index.sqlite3")) as db:
        one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
        return {"aliases": one("SELECT count(*) FROM aliases"),
                "asked": one("SELECT total(asked) FROM usage"),
                "usage": one("SELECT count(*) FROM usage"),
                "totals": one("SELECT total(value) FROM history_totals"),
                "deltas": one("SELECT total(value) FROM history_deltas"),
                "workers": one("SELECT count(*) FROM history_workers")}


WHOLE = {"aliases": ROWS, "asked": 3.0 * ROWS, "usage": ROWS, "totals": 5.0 * ROWS,
         "deltas": 5.0 * ROWS, "workers": 1}


def old_files_left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.split("-")[0] in OLD_FILES)


def test_old_stores_move_into_the_index_once(tmp_path) -> None:
    root = tmp_path / "cache"
    plant_old_stores(root)
    with contextlib.closing(sqlite3.connect(root / "aliases.sqlite3")) as db, db:
        db.execute("UPDATE aliases SET updated = 1.0 WHERE lineage = 'l0'")
    Cache(root).close()
    assert old_files_left(root) == []
    assert figures(root) == WHOLE
    with contextlib.closing(sqlite3.connect(root / "index.sqlite3")) as db, db:
        db.execute("UPDATE aliases SET key = 'newer', updated = 5e9 WHERE lineage = 'l1'")
        assert db.execute("SELECT count(*) FROM absorbed").fetchone()[0] == 0
    plant_old_stores(root, rows=2)  # an old worker wrote again: merged, the newer alias wins
    Cache(root).close()
    with contextlib.closing(sqlite3.connect(root / "index.sqlite3")) as db:
        assert db.execute("SELECT key FROM aliases WHERE lineage = 'l1'").fetchone() == (
            "newer",)
        assert db.execute("SELECT asked FROM usage WHERE key = 'u0'").fetchone() == (6,)
    assert old_files_left(root) == []


def test_an_index_from_before_gets_the_tables_and_the_rows(tmp_path) -> None:
    """The upgrade as it happens: an index without the new tables (as 0.2 left it) beside
    the old files."""
    root = tmp_path / "cache"
    Cache(root).close()
    with contextlib.closing(sqlite3.connect(root / "index.sqlite3")) as db, db:
        for table in FOLDER_TABLES:
            db.execute(f"DROP TABLE {table}")
    plant_old_stores(root)
    Cache(root).close()
    assert figures(root) == WHOLE
    assert old_files_left(root) == []


CHILD = """
import contextlib, os, sys, time
from voxcache import Cache
from voxcache.tiers.index import Index
where = sys.argv[2]
if where == "before-commit":
    real = Index.transaction
    @contextlib.contextmanager
    def stalled(self, wait=None):
        with real(self, wait) as db:
            yield db
            if db.execute("SELECT count(*) FROM absorbed").fetchone()[0]:
                print("stalled", flush=True)
                time.sleep(60)
    Index.transaction = stalled
else:
    unlink = os.unlink
    def stalled(path, *args, **kwargs):
        if str(path).endswith(where):
            print("stalled", flush=True)
            time.sleep(60)
        return unlink(path, *args, **kwargs)
    os.unlink = stalled
Cache(sys.argv[1])
print("opened", flush=True)
"""


@pytest.mark.parametrize("where", ["before-commit", "usage.sqlite3", "history.sqlite3-wal"])
def test_a_move_killed_at_any_step_loses_nothing_and_counts_nothing_twice(
        tmp_path, where) -> None:
    """kill -9 inside the move's transaction, between its commit and the file's removal,
    and between removing a file's log and the file: the next open has every row once."""
    root = tmp_path / "cache"
    plant_old_stores(root)
    child = forked.popen([sys.executable, "-c", CHILD, str(root), where],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "stalled"
        child.kill()
    finally:
        child.wait()
    assert old_files_left(root)  # it did stop before the end
    Cache(root).close()
    assert figures(root) == WHOLE
    assert old_files_left(root) == []


HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(60)
"""


def test_a_locked_index_leaves_the_old_files_for_a_later_flush(tmp_path) -> None:
    root = tmp_path / "cache"
    Cache(root).close()
    plant_old_stores(root)
    holder = forked.popen([sys.executable, "-c", HOLD_LOCK, str(root / "index.sqlite3")],
                          stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        cache = Cache(root)
        assert time.monotonic() - started < 10
        assert len(old_files_left(root)) >= 3  # untouched while the index is locked
    finally:
        holder.kill()
        holder.wait()
    try:
        assert cache.stats()["counters"].get("index_errors", 0) >= 1
        cache.folder.flush()
        assert old_files_left(root) == []
        assert figures(root) == WHOLE
    finally:
        cache.close()


def test_a_damaged_old_aliases_table_is_set_aside_and_the_rest_moves(tmp_path) -> None:
    root = tmp_path / "cache"
    Cache(root).close()
    plant_old_stores(root)
    path = root / "aliases.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = db.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as f:  # the table's pages (after the schema page) are garbage
        f.seek(page * 2)
        f.write(b"\x0d\xff" * page)
    cache = Cache(root)
    try:
        assert not cache.folder.index.rebuilding()  # the old file's damage is not the index's
        assert cache.folder.health().state != "degraded"
        moved = figures(root)
        assert moved["usage"] == ROWS and moved["totals"] == 5.0 * ROWS
        assert old_files_left(root) == []
        assert any(p.name.startswith("aliases.sqlite3.")
                   for p in (root / "quarantine").iterdir())
    finally:
        cache.close()


def test_a_symlink_planted_at_an_old_name_is_never_read_nor_followed(tmp_path) -> None:
    outside = tmp_path / "outside.sqlite3"
    with contextlib.closing(sqlite3.connect(outside)) as db, db:  # must not be read
        db.executescript(OLD_SCHEMAS["aliases.sqlite3"])
        db.execute("INSERT INTO aliases VALUES ('planted', 'k', 'm', 1.0)")
    before = outside.read_bytes()
    root = tmp_path / "cache"
    root.mkdir()
    (root / "aliases.sqlite3").symlink_to(outside)
    (root / "usage.sqlite3-wal").symlink_to(outside)
    Cache(root).close()
    assert outside.read_bytes() == before
    assert figures(root)["aliases"] == 0
    assert old_files_left(root) == []
    assert sorted(p.name.split(".sqlite3")[0] for p in (root / "quarantine").iterdir()
                  if p.is_symlink()) == ["aliases", "usage"]


def _chattr(flag: str, path: Path) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


def test_a_read_only_folder_or_file_is_left_whole_until_it_can_be_moved(tmp_path) -> None:
    """An immutable folder refuses to open (as before) with its old files untouched; an
    immutable old file is read (SQLite opens it read-only) but cannot be removed: its rows
    move once, and the file goes at a later flush without being counted again."""
    root = tmp_path / "cache"
    Cache(root).close()
    plant_old_stores(root)
    if os.geteuid() != 0 or not _chattr("+i", root):
        pytest.skip("needs chattr +i (root on ext4/xfs)")
    try:
        with pytest.raises(Exception, match="not usable"):
            Cache(root)
    finally:
        _chattr("-i", root)
    assert len(old_files_left(root)) >= 3
    assert _chattr("+i", root / "usage.sqlite3")
    try:
        cache = Cache(root)
        try:
            assert old_files_left(root) == ["usage.sqlite3"]
            assert figures(root) == WHOLE
            cache.folder.flush()  # still immutable: tried again, not counted again
            assert figures(root) == WHOLE
        finally:
            _chattr("-i", root / "usage.sqlite3")
        cache.folder.flush()
        cache.close()
    finally:
        _chattr("-i", root / "usage.sqlite3")
    assert old_files_left(root) == []
    assert figures(root) == WHOLE
