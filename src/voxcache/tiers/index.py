"""SQLite index of the disk tier: sizes, eviction scores, pins, persisted counters.

The index is only an accelerator. Reads never consult it (a hit goes straight
from key to file), so it can lag behind, be deleted, or be rebuilt from the
files at any time. WAL mode lets one writer and many readers work across
processes; totals are kept by triggers so every process sees the same figures.
Asks are written in batches (``record_access``), never on each read.

The eviction policy (``tiers.eviction``) keeps its state here too, so every process
sharing the folder applies the same one: each entry's ``score`` and ``cost``, the
``ghosts`` of recently evicted keys, and the eviction ``clock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fsmode import locked, private_sqlite
from .eviction import GHOSTS_PER_ENTRY, advance, score

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL,
    last_access REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    score REAL NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0,
    pin_until REAL,
    tenant TEXT NOT NULL DEFAULT '',
    engine TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    voice TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL DEFAULT '',
    parent TEXT NOT NULL DEFAULT '',
    cost REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_by_score ON entries(pinned, score);
CREATE INDEX IF NOT EXISTS entries_by_expiry ON entries(expires) WHERE expires IS NOT NULL;
CREATE INDEX IF NOT EXISTS entries_by_parent ON entries(parent) WHERE parent != '';
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('disk_bytes', 0), ('disk_entries', 0);
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    UPDATE counters SET value = value + NEW.size WHERE name = 'disk_bytes';
    UPDATE counters SET value = value + 1 WHERE name = 'disk_entries';
END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    UPDATE counters SET value = value - OLD.size WHERE name = 'disk_bytes';
    UPDATE counters SET value = value - 1 WHERE name = 'disk_entries';
END;
CREATE TABLE IF NOT EXISTS ghosts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    score REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policy (name TEXT PRIMARY KEY, value REAL NOT NULL);
INSERT OR IGNORE INTO policy VALUES ('clock', 0);
CREATE TABLE IF NOT EXISTS purged (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    until REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pack_sequences (
    key_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL,
    digest TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS savings (
    bucket INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    voice TEXT NOT NULL,
    hits INTEGER NOT NULL,
    chars INTEGER NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (bucket, tenant, voice)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS callers (
    key TEXT NOT NULL,
    caller TEXT NOT NULL,
    seen REAL NOT NULL,
    PRIMARY KEY (key, caller)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refused (
    key TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    tenant TEXT NOT NULL,
    at REAL NOT NULL,
    times INTEGER NOT NULL
);
"""

MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("parent", "ALTER TABLE entries ADD COLUMN parent TEXT NOT NULL DEFAULT '';"),
    ("cost", "ALTER TABLE entries ADD COLUMN cost REAL NOT NULL DEFAULT 0;"
             # scores of the old policy were seconds since 1970: rank the old rows by their
             # hits under the new one (at clock 0: an index without costs has no clock yet),
             # or they would outlive every new take
             "UPDATE entries SET score = vx_score(NULL, hits, cost, size, 0, kind);"
             "DROP INDEX IF EXISTS entries_by_kind_score;"),
)
"""Columns added since the first schema, with the statements that add each to an old index."""

DURABLE_TABLES = ("purged", "pack_sequences", "savings", "callers", "refused")
"""Tables that are not derived from the files, so a rebuild of the index must carry them
over (``carry_over``): purged keys (``tiers.purged``), the pack sequences seen per
publisher (``packs.sequence``), the savings ledger (``policies.savings``), the distinct
callers of keys not yet admitted and the takes the quality gate refused
(``policies.admit``). Added to an old index by the schema itself."""

BUSY_WAIT = 5.0
"""Seconds a maintenance statement waits for another process's write lock."""
REQUEST_WAIT = 0.2
"""Seconds a statement on a request's path waits: a locked index must not stall a request
(it used to wait 30 s, then fail); what cannot be written in time is deferred."""


_CLOCK_AND_GHOST = ("SELECT (SELECT value FROM policy WHERE name = 'clock'), "
                    "(SELECT score FROM ghosts WHERE key = ?)")
"""The eviction clock and a returning key's ghost score, in one statement (a miss's insert)."""


def _clock(db: sqlite3.Connection) -> float:
    """The eviction clock (``tiers.eviction``), read inside the caller's transaction."""
    row = db.execute("SELECT value FROM policy WHERE name = 'clock'").fetchone()
    return float(row[0]) if row else 0.0


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One entry as the index knows it."""

    key: str
    kind: str
    size: int
    created: float
    expires: float | None
    last_access: float
    hits: int
    pinned: bool
    pin_until: float | None
    tenant: str
    engine: str
    model: str
    voice: str
    text: str
    parent: str = ""
    """For a derived entry (an encoded delivery), the key it was derived from."""
    cost: float = 0.0
    """Engine seconds the entry cost to make (0.0: not recorded; ``eviction.take_seconds``)."""


def is_damaged(exc: BaseException) -> bool:
    """True for SQLite errors that mean the file itself is damaged (not locked or full)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc).lower()
    return not isinstance(exc, sqlite3.OperationalError) or "malformed" in text or (
        "not a database" in text)


class Index:
    """The SQLite index; one connection per thread, WAL mode."""

    def __init__(self, path: Path | str, *, uri: bool = False) -> None:
        self.path = path
        self._uri = uri
        self._local = threading.local()
        self._keepalive: sqlite3.Connection | None = None
        self._generation = 0
        self._inode: int | None = None
        self._open_lock = None if uri else Path(path).parent / "locks" / "index.lock"
        if not uri:
            private_sqlite(path)
        self._first_open()

    def _first_open(self, attempts: int = 100) -> None:
        """Create (or migrate) the schema, retrying while another process does the same.

        Switching a fresh file to WAL takes an exclusive lock and SQLite does not wait
        for it (its busy handler is not consulted), so processes opening one new folder
        at the same instant can see "database is locked" here; seen with 4 workers
        starting together. Every step is idempotent, so trying again is safe. An index
        whose schema is already current is only read, so a start never waits on another
        process's write transaction.
        """
        for attempt in range(attempts):
            db = None
            try:
                if self._schema_current():
                    return
                db = self._connect()
                # One transaction: a process never sees a new column before its data is
                # migrated, and a migration that fails leaves nothing half done. Columns
                # before the schema: its indexes may name them.
                db.executescript(f"BEGIN IMMEDIATE;{self._migrations(db)}{SCHEMA}COMMIT;")
                return
            except sqlite3.OperationalError as exc:
                if db is not None and db.in_transaction:
                    db.execute("ROLLBACK")
                # "duplicate column": another process migrated after we looked; look again
                if not any(s in str(exc) for s in ("locked", "duplicate column")) or (
                        attempt == attempts - 1):
                    raise
                self.close()
                time.sleep(0.02 + 0.002 * attempt)

    def _schema_current(self) -> bool:
        db = self._connect()
        columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE "
                                                "type = 'table'")}
        return bool(columns) and all(name in columns for name, _ in MIGRATIONS) and (
            set(DURABLE_TABLES) <= tables)

    @staticmethod
    def _migrations(db: sqlite3.Connection) -> str:
        """The statements that bring an existing ``entries`` table up to date (none for a
        new index: the schema creates it whole)."""
        columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
        if not columns:
            return ""
        return "".join(script for name, script in MIGRATIONS if name not in columns)

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is not None and self._local.generation == self._generation:
            return db
        if db is not None:
            db.close()
        with self._opening():
            db = sqlite3.connect(self.path, timeout=BUSY_WAIT, isolation_level=None,
                                 check_same_thread=False, uri=self._uri)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            if self._inode is None and not self._uri:
                self._inode = os.stat(self.path).st_ino
        db.create_function("vx_score", 6, score, deterministic=True)
        self._local.db = db
        self._local.generation = self._generation
        self._local.wait = BUSY_WAIT
        return db

    @contextmanager
    def _opening(self) -> Iterator[None]:
        """Hold the index's open lock shared while a connection opens the files.

        ``repair.swap_index`` takes it exclusively while it moves a damaged index and
        its ``-wal``/``-shm`` aside and puts the rebuilt one in place, so no connection
        can ever pair the new database with the old write-ahead log.
        """
        if self._open_lock is None:
            yield
            return
        with locked(self._open_lock, fcntl.LOCK_SH):
            yield

    def reopen(self) -> None:
        """Make every thread open a fresh connection at its next statement."""
        self._inode = None
        self._generation += 1

    def replaced_on_disk(self) -> bool:
        """True when the file at ``path`` is no longer the one this index opened."""
        if self._uri or self._inode is None:
            return False
        try:
            return os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:
            return True

    def _waiting(self, db: sqlite3.Connection, wait: float | None) -> None:
        """Set how long the next statements wait for a lock (a cheap PRAGMA, only on change)."""
        wait = BUSY_WAIT if wait is None else wait
        if self._local.wait != wait:
            db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            self._local.wait = wait

    @contextmanager
    def transaction(self, wait: float | None = None) -> Iterator[sqlite3.Connection]:
        """Run statements in one IMMEDIATE transaction (one writer at a time); ``wait``
        bounds how long it waits for another writer (``REQUEST_WAIT`` on a request)."""
        db = self._connect()
        self._waiting(db, wait)
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def query(self, sql: str, args: Iterable[Any] = (), wait: float | None = None
              ) -> list[tuple[Any, ...]]:
        """Run a read-only query."""
        db = self._connect()
        self._waiting(db, wait)
        return db.execute(sql, tuple(args)).fetchall()

    def add(self, row: IndexRow, wait: float | None = None,
            stored: Callable[[IndexRow], bool] | None = None, replace: bool = False) -> bool:
        """Insert a row unless the key holds one at least as new (or, with ``stored``, its
        entry is gone: see ``add_many``); True if inserted. ``replace``: the row replaces
        the key's row whatever its age (the entry was replaced by the published take)."""
        return self.add_many([row], wait, stored, replace) == 1

    def add_many(self, rows: Iterable[IndexRow], wait: float | None = None,
                 stored: Callable[[IndexRow], bool] | None = None,
                 replace: bool = False) -> int:
        """Insert rows in one transaction; return how many went in.

        A row replaces the key's row only when it describes a newer take (an expired
        entry re-rendered under the same key): delete-then-insert, so the totals'
        triggers see both sides, which an upsert would hide from them.

        A key evicted not long ago comes back with its ghost's score plus this ask; any
        other enters on probation (``eviction.score``).

        ``stored(row)`` is asked under the write lock, and a row whose entry is no longer
        stored is skipped. Every remover takes the entry away before its row or while
        holding this lock, so a row added this way (a writer's, a deferred one, the folder
        walk's) can never outlive its entry, whatever ran in between.
        """
        added = 0
        with self.transaction(wait) as db:
            for r in rows:
                if stored is not None and not stored(r):
                    continue
                db.execute("DELETE FROM entries WHERE key = ? AND (created < ? OR ?)",
                           (r.key, r.created, int(replace)))
                clock, ghost = db.execute(_CLOCK_AND_GHOST, (r.key,)).fetchone()
                clock = 0.0 if clock is None else float(clock)
                if ghost is not None:
                    db.execute("DELETE FROM ghosts WHERE key = ?", (r.key,))
                previous = None if ghost is None else float(ghost)
                asks = r.hits + (previous is not None)
                added += db.execute(
                    "INSERT OR IGNORE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (r.key, r.kind, r.size, r.created, r.expires, r.last_access, r.hits,
                     score(previous, asks, r.cost, r.size, clock, r.kind), int(r.pinned),
                     r.pin_until, r.tenant, r.engine, r.model, r.voice, r.text, r.parent,
                     r.cost)).rowcount
        return added

    def owner(self, key: str, wait: float | None = None) -> str | None:
        """The tenant an indexed entry belongs to (None: not indexed). One primary-key
        lookup whatever the answer, so "someone else's" costs what "absent" costs."""
        rows = self.query("SELECT tenant FROM entries WHERE key = ?", (key,), wait)
        return rows[0][0] if rows else None

    def children(self, key: str, wait: float | None = None) -> list[tuple[str, str]]:
        """(key, kind) of the entries derived from ``key`` (its encoded deliveries)."""
        return [(k, kind) for k, kind in self.query(
            "SELECT key, kind FROM entries WHERE parent = ?", (key,), wait)]

    def remove(self, keys: Iterable[str], wait: float | None = None,
               unless: Callable[[str], bool] | None = None) -> int:
        """Delete rows; return how many went. ``unless(key)``, asked under the write lock,
        keeps a row (the walk's check that an entry it missed was not stored again since)."""
        with self.transaction(wait) as db:
            return sum(db.execute("DELETE FROM entries WHERE key = ?", (k,)).rowcount
                       for k in keys if unless is None or not unless(k))

    def record_access(self, accesses: dict[str, tuple[int, float]]) -> None:
        """Apply a batch of (hit count, last access) per key in one transaction: the hits
        count as asks at the current eviction clock."""
        with self.transaction() as db:
            clock = _clock(db)
            db.executemany(
                "UPDATE entries SET hits = hits + ?1, last_access = max(last_access, ?2), "
                "score = vx_score(score, ?1, cost, size, ?4, kind) WHERE key = ?3",
                [(hits, last, key, clock) for key, (hits, last) in accesses.items()],
            )

    def evict(self, rows: list[IndexRow], cap: float, by_size: bool,
              remove_entry: Callable[[IndexRow], None], wait: float | None = None) -> int:
        """Delete victims' rows and, still holding the write lock, their entries
        (``remove_entry``, so that a folder walk cannot index one in between); return how
        many rows were really deleted.

        Each leaves a ghost (its key and score) and the clock advances by what they freed
        of ``cap`` (bytes, or entries when ``by_size`` is false); ghosts beyond
        ``GHOSTS_PER_ENTRY`` per stored entry are forgotten, oldest first.
        """
        gone: list[IndexRow] = []
        with self.transaction(wait) as db:
            for row in rows:
                db.execute("INSERT OR REPLACE INTO ghosts (key, score) "
                           "SELECT key, score FROM entries WHERE key = ?", (row.key,))
                if db.execute("DELETE FROM entries WHERE key = ?", (row.key,)).rowcount:
                    gone.append(row)
                    remove_entry(row)
            freed = sum(row.size for row in gone) if by_size else len(gone)
            db.execute("UPDATE policy SET value = ? WHERE name = 'clock'",
                       (advance(_clock(db), freed, cap),))
            db.execute("DELETE FROM ghosts WHERE seq <= (SELECT max(seq) FROM ghosts) - ? * "
                       "(SELECT value FROM counters WHERE name = 'disk_entries')",
                       (GHOSTS_PER_ENTRY,))
        return len(gone)

    def add_counters(self, deltas: dict[str, int]) -> None:
        """Add to persisted counters (hits, misses, evictions by reason …)."""
        if not deltas:
            return
        with self.transaction() as db:
            for name, delta in deltas.items():
                db.execute(
                    "INSERT INTO counters VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                    (name, delta))

    def counters(self, wait: float | None = None) -> dict[str, int]:
        """Return every persisted counter."""
        return dict(self.query("SELECT name, value FROM counters", (), wait))

    def totals(self, wait: float | None = None) -> tuple[int, int]:
        """Return (bytes, entries) of the disk tier."""
        c = self.counters(wait)
        return c.get("disk_bytes", 0), c.get("disk_entries", 0)

    def set_pin(self, key: str, pinned: bool, pin_until: float | None = None,
                wait: float | None = None) -> bool:
        """Pin or unpin an entry; False if the key is not indexed."""
        with self.transaction(wait) as db:
            cur = db.execute("UPDATE entries SET pinned = ?, pin_until = ? WHERE key = ?",
                             (int(pinned), pin_until if pinned else None, key))
            return cur.rowcount == 1

    def rows(self, where: str = "1", args: Iterable[Any] = (), order: str = "last_access DESC",
             limit: int = -1) -> list[IndexRow]:
        """Return rows matching a SQL condition (internal callers only)."""
        sql = f"SELECT * FROM entries WHERE {where} ORDER BY {order} LIMIT ?"
        return [IndexRow(*r[:7], bool(r[8]), *r[9:]) for r in self.query(sql, (*args, limit))]

    def healthy(self) -> bool:
        """True when a fresh connection reads the whole file without finding damage."""
        if self._uri:
            return True
        try:
            read_only = Path(self.path).resolve().as_uri() + "?mode=ro"
            with contextlib.closing(sqlite3.connect(read_only, uri=True,
                                                    timeout=BUSY_WAIT)) as db:
                return db.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok"
        except sqlite3.DatabaseError:
            return False

    def carry_over(self, old: str | os.PathLike[str]) -> int:
        """Copy the durable tables' rows from another index file (a damaged one being
        replaced, when they still read) into this one; return how many rows came."""
        copied = 0
        for table in DURABLE_TABLES:
            try:
                with contextlib.closing(sqlite3.connect(
                        Path(old).resolve().as_uri() + "?mode=ro", uri=True, timeout=1)) as db:
                    rows = db.execute(f"SELECT * FROM {table}").fetchall()
            except sqlite3.DatabaseError:
                continue
            if rows:
                marks = ",".join("?" * len(rows[0]))
                with self.transaction() as db:
                    copied += sum(db.execute(f"INSERT OR IGNORE INTO {table} VALUES "
                                             f"({marks})", row).rowcount for row in rows)
        return copied

    @classmethod
    def in_memory(cls) -> Index:
        """A process-private index, for when the folder cannot hold one (a full disk)."""
        index = cls(f"file:voxcache-index-{id(object())}?mode=memory&cache=shared", uri=True)
        index._keepalive = index._connect()  # the shared memory db lives while one is open
        return index

    def close(self) -> None:
        """Close this thread's connection."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
