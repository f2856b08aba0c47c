"""SQLite index of the disk tier: sizes, recency, pins, persisted counters.

The index is only an accelerator. Reads never consult it (a hit goes straight
from key to file), so it can lag behind, be deleted, or be rebuilt from the
files at any time. WAL mode lets one writer and many readers work across
processes; totals are kept by triggers so every process sees the same figures.
Recency is written in batches (``record_access``), never on each read.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    text TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS entries_by_score ON entries(pinned, score);
CREATE INDEX IF NOT EXISTS entries_by_kind_score ON entries(pinned, kind, score);
CREATE INDEX IF NOT EXISTS entries_by_expiry ON entries(expires) WHERE expires IS NOT NULL;
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
"""

FREQUENCY_WEIGHT = 3600.0
"""Seconds of recency one doubling of the hit count is worth in the eviction score."""


def score(last_access: float, hits: int) -> float:
    """Eviction score: recency boosted by log frequency; lowest goes first.

    Pure LRU lets a one-off scan of new sentences flush the all-day greetings;
    pure LFU never forgets yesterday's promotion. Adding ``log2(1+hits)`` hours to
    the last access keeps frequently asked phrases through scans while letting
    them age out once nobody asks any more.
    """
    return last_access + FREQUENCY_WEIGHT * math.log2(1 + hits)


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


class Index:
    """The SQLite index; one connection per thread, WAL mode."""

    def __init__(self, path: Path | str, *, uri: bool = False) -> None:
        self.path = path
        self._uri = uri
        self._local = threading.local()
        self._keepalive: sqlite3.Connection | None = None
        self._first_open()

    def _first_open(self, attempts: int = 100) -> None:
        """Create the schema, retrying while another process does the same.

        Switching a fresh file to WAL takes an exclusive lock and SQLite does not wait
        for it (its busy handler is not consulted), so processes opening one new folder
        at the same instant can see "database is locked" here; seen with 4 workers
        starting together. Every step is idempotent, so trying again is safe.
        """
        for attempt in range(attempts):
            try:
                self._connect().executescript(f"BEGIN IMMEDIATE;{SCHEMA}COMMIT;")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == attempts - 1:
                    raise
                self.close()
                time.sleep(0.02 + 0.002 * attempt)

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                 check_same_thread=False, uri=self._uri)
            self._local.db = db
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.create_function("vx_score", 2, score, deterministic=True)
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run statements in one IMMEDIATE transaction (one writer at a time)."""
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only query."""
        return self._connect().execute(sql, tuple(args)).fetchall()

    def add(self, row: IndexRow) -> bool:
        """Insert a row unless the key is present; True if inserted."""
        with self.transaction() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (row.key, row.kind, row.size, row.created, row.expires, row.last_access,
                 row.hits, score(row.last_access, row.hits), int(row.pinned), row.pin_until,
                 row.tenant, row.engine, row.model, row.voice, row.text),
            )
            return cur.rowcount == 1

    def remove(self, keys: Iterable[str]) -> int:
        """Delete rows; return how many existed."""
        with self.transaction() as db:
            return sum(db.execute("DELETE FROM entries WHERE key = ?", (k,)).rowcount
                       for k in keys)

    def record_access(self, accesses: dict[str, tuple[int, float]]) -> None:
        """Apply a batch of (hit count, last access) per key in one transaction."""
        with self.transaction() as db:
            db.executemany(
                "UPDATE entries SET hits = hits + ?1, last_access = max(last_access, ?2), "
                "score = vx_score(max(last_access, ?2), hits + ?1) WHERE key = ?3",
                [(hits, last, key) for key, (hits, last) in accesses.items()],
            )

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

    def counters(self) -> dict[str, int]:
        """Return every persisted counter."""
        return dict(self.query("SELECT name, value FROM counters"))

    def totals(self) -> tuple[int, int]:
        """Return (bytes, entries) of the disk tier."""
        c = self.counters()
        return c.get("disk_bytes", 0), c.get("disk_entries", 0)

    def set_pin(self, key: str, pinned: bool, pin_until: float | None = None) -> bool:
        """Pin or unpin an entry; False if the key is not indexed."""
        with self.transaction() as db:
            cur = db.execute("UPDATE entries SET pinned = ?, pin_until = ? WHERE key = ?",
                             (int(pinned), pin_until if pinned else None, key))
            return cur.rowcount == 1

    def rows(self, where: str = "1", args: Iterable[Any] = (), order: str = "last_access DESC",
             limit: int = -1) -> list[IndexRow]:
        """Return rows matching a SQL condition (internal callers only)."""
        sql = f"SELECT * FROM entries WHERE {where} ORDER BY {order} LIMIT ?"
        return [IndexRow(*r[:7], bool(r[8]), *r[9:]) for r in self.query(sql, (*args, limit))]

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
