"""SQLite index of the disk tier: sizes, eviction scores, pins, persisted counters.

Only an accelerator: reads never consult it, so it may lag, be deleted or be rebuilt from
the files — but never be silently short (``index_db``, ``repair``). WAL lets one writer and
many readers share it; totals are kept by triggers; asks are written in batches
(``record_access``). The eviction policy keeps its state here (``score``, ``cost``,
``ghosts``, ``clock``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .eviction import GHOSTS_PER_ENTRY, advance, score
from .index_db import BUSY_WAIT, REQUEST_WAIT, IndexFile, is_damaged
from .index_schema import DURABLE_TABLES, SALVAGED, SCHEMA, Salvage, salvage

__all__ = ["BUSY_WAIT", "DURABLE_TABLES", "REQUEST_WAIT", "SALVAGED", "SCHEMA", "Index",
           "IndexRow", "Salvage", "is_damaged", "salvage", "score"]

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



class Index(IndexFile):
    """The disk tier's queries on the index database."""

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

    def record_access(self, accesses: dict[str, tuple[int, float]],
                      wait: float | None = None) -> None:
        """Apply a batch of (hit count, last access) per key in one transaction: the hits
        count as asks at the current eviction clock."""
        with self.transaction(wait) as db:
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

    def add_counters(self, deltas: dict[str, int], wait: float | None = None) -> None:
        """Add to persisted counters (hits, misses, evictions by reason …)."""
        if not deltas:
            return
        with self.transaction(wait) as db:
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

    def carry_over(self, *sources: Salvage) -> int:
        """Add what a rebuild from the files cannot know — persisted counters and the
        durable tables' rows — from salvaged copies (``salvage``), the first source first:
        its counters alone are taken, and a durable row it has wins over a later source's
        (``INSERT OR IGNORE``). Return how many durable rows came."""
        copied = 0
        counted = False
        with self.transaction() as db:
            for source in sources:
                counters = [(name, value) for name, value in source.get("counters", ())
                            if name not in ("disk_bytes", "disk_entries")
                            and isinstance(value, int)]
                if counters and not counted:
                    db.executemany("INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO "
                                   "UPDATE SET value = value + excluded.value", counters)
                    counted = True
                for table in DURABLE_TABLES:
                    for row in source.get(table, ()):
                        marks = ",".join("?" * len(row))
                        copied += db.execute(f"INSERT OR IGNORE INTO {table} VALUES ({marks})",
                                             row).rowcount
        return copied
