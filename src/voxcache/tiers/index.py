"""SQLite index of the disk tier: sizes, eviction scores, pins, persisted counters.

The index is only an accelerator. Reads never consult it (a hit goes straight
from key to file), so it can lag behind, be deleted, or be rebuilt from the
files at any time — but never be silently short: every statement first checks that
the path still names the file its connection opened, and an index that does not yet
hold every stored entry is marked until a rebuild has walked the folder (``repair``).
WAL mode lets one writer and many readers work across processes; totals are kept by
triggers so every process sees the same figures.
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
from .index_file import Identity, connecting, identity_of, opened, problem_of

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

SALVAGED = ("counters", *DURABLE_TABLES)
"""What a rebuild from the files cannot know, so it is carried over (``carry_over``)."""
Salvage = dict[str, list[tuple[Any, ...]]]
"""Rows of the ``SALVAGED`` tables that still read, by table."""


def salvage(db: sqlite3.Connection) -> Salvage:
    """The rows of the ``SALVAGED`` tables that still read through ``db``."""
    found: Salvage = {}
    for table in SALVAGED:
        with contextlib.suppress(sqlite3.Error):
            found[table] = db.execute(f"SELECT * FROM {table}").fetchall()
    return found


REBUILDING = "INSERT OR REPLACE INTO policy VALUES ('rebuilding', 1);"
"""Marks an index that does not yet hold a row for every stored entry: born empty in a
folder that holds something, or set up in place of a damaged one. ``repair`` walks the
folder and clears the mark; whoever finds it with no rebuild running starts one."""

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

    def __init__(self, path: Path | str, *, uri: bool = False, mark_new: bool = False) -> None:
        """Open (creating it if need be) the index at ``path``; with ``mark_new``, an index
        created here is marked for a rebuild (``REBUILDING``): it is new in a folder that
        may already hold entries."""
        self.path = path
        self._uri = uri
        self._local = threading.local()
        self._keepalive: sqlite3.Connection | None = None
        self._generation = 0
        self._identity: Identity | None = None
        self._companions: tuple[Identity, dict[str, Identity | None]] | None = None
        self._kept: tuple[Identity, Salvage] | None = None
        self._checking: sqlite3.Connection | None = None
        self._open_lock = None if uri else Path(path).parent / "locks" / "index.lock"
        if not uri:
            private_sqlite(path)
        self._first_open(mark_new)

    def _first_open(self, mark_new: bool, attempts: int = 100) -> None:
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
                migrations = self._migrations(db)
                mark = REBUILDING if mark_new and migrations is None else ""
                db.executescript(f"BEGIN IMMEDIATE;{migrations or ''}{SCHEMA}{mark}COMMIT;")
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
    def _migrations(db: sqlite3.Connection) -> str | None:
        """The statements that bring an existing ``entries`` table up to date (None for a
        new index: the schema creates it whole)."""
        columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
        if not columns:
            return None
        return "".join(script for name, script in MIGRATIONS if name not in columns)

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection, after checking (one ``lstat``) that the path still
        names the file it opened: a file removed or replaced under a running process is
        noticed at its next statement (``_follow``)."""
        db = getattr(self._local, "db", None)
        if db is not None and self._local.generation == self._generation:
            if self._identity is None or identity_of(self.path) == self._identity:
                return db
            self._follow(db)
        if db is not None:
            db.close()
            self._local.db = None
        with self._opening(), connecting():
            if not self._uri:
                self._refuse_unsound()
            target = self.path if self._uri else _read_write_uri(self.path)
            db = sqlite3.connect(target, timeout=BUSY_WAIT, isolation_level=None,
                                 check_same_thread=False, uri=True)
            if not self._uri:
                identity = identity_of(self.path)
                opened(identity)
                if self._identity is None:
                    self._identity = identity
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        db.create_function("vx_score", 6, score, deterministic=True)
        self._local.db = db
        self._local.generation = self._generation
        self._local.wait = BUSY_WAIT
        return db

    def _refuse_unsound(self) -> None:
        """Raise (as damage: ``is_damaged``) when the path holds no sound index file, so
        that SQLite never opens a folder, a symlink's target, or a new file beside an old
        write-ahead log; the caller fails open and a rebuild starts (``repair``)."""
        problem = problem_of(self.path)
        if problem is not None:
            raise sqlite3.DatabaseError(f"index {self.path}: {problem}")

    def _follow(self, db: sqlite3.Connection) -> None:
        """The path names another file than the one this index opened (or none): a rebuilt
        index swapped in by another process is followed (every thread reopens); anything
        else is damage, raised for the caller's repair. What only the file being left knows
        is kept first (``_keep``)."""
        self._keep(db)
        self._refuse_unsound()
        self.reopen()

    def _keep(self, db: sqlite3.Connection) -> None:
        """Read the counters and durable tables (purged keys, pack sequences: not in the
        files) through this thread's connection to the file being left, which reads it
        even when the path no longer names it (deleted, or renamed over by garbage), so a
        rebuild carries them over (``kept``). Once per file left."""
        left = self._identity
        if left is None or (self._kept is not None and self._kept[0] == left):
            return
        found = salvage(db)
        if found:
            self._kept = (left, found)

    @contextmanager
    def _opening(self) -> Iterator[None]:
        """Hold the index's open lock shared while a connection opens the files.

        ``repair.replace_index`` takes it exclusively while it moves a damaged index's
        ``-wal``/``-shm`` aside and puts a new one in its place, so no connection can ever
        pair the new database with the old write-ahead log.
        """
        if self._open_lock is None:
            yield
            return
        with locked(self._open_lock, fcntl.LOCK_SH):
            yield

    def reopen(self) -> None:
        """Make every thread open a fresh connection at its next statement."""
        self._identity = None
        self._companions = None
        self._generation += 1

    def watch(self) -> tuple[Identity | None, str | None, bool]:
        """Once a flush interval: (identity, problem, marked) of the file at the path — why
        it must be replaced (None: it need not) and whether it is marked for a rebuild.

        The statement that reads the mark is where a file removed or replaced under this
        process is noticed (``_connect``, raised as damage). With that connection open, the
        ``-wal`` and ``-shm`` cannot go away or change legitimately (SQLite removes them
        when the last connection closes), so one that did since the last watch was removed
        under the running processes: a new connection would pair another log or
        shared-memory file with this database (SQLite answers such a connection "disk I/O
        error", so that error does not stop the look)."""
        failed: sqlite3.OperationalError | None = None
        try:
            marked = self.rebuilding(REQUEST_WAIT)
        except sqlite3.OperationalError as exc:
            failed, marked = exc, False
        if self._uri:
            return None, None, marked
        identity = identity_of(self.path)
        problem = problem_of(self.path)
        if problem is None and identity is not None and identity == self._identity:
            now = {suffix: identity_of(f"{self.path}{suffix}") for suffix in ("-wal", "-shm")}
            seen, self._companions = self._companions, (identity, now)
            before = seen[1] if seen is not None and seen[0] == identity else now
            changed = [suffix for suffix, found in now.items()
                       if found is None or found != before[suffix]]
            if changed:  # judged on this identity: a replacement meanwhile makes it moot
                problem = f"its {changed[0]} was removed or replaced while in use"
        if problem is None and failed is not None:
            raise failed
        return identity, problem, marked

    def problem(self, pages: bool = True) -> str | None:
        """Why the file at the path is not a sound index (``index_file.MISSING`` if there is
        none); with ``pages``, SQLite's ``quick_check`` reads every page too. None: sound."""
        if self._uri:
            return None
        problem = problem_of(self.path)
        if problem is None and pages and not self.check_pages():
            problem = "damaged pages (quick_check)"
        return problem

    def check_pages(self) -> bool:
        """``PRAGMA quick_check`` on a fresh read-only connection: False when it finds
        damage (or the file cannot be read as a database). It reads the whole file (about
        0.5 s per million entries from the page cache), so it runs in the background;
        ``interrupt_check`` stops it (the process is closing)."""
        if self._uri:
            return True
        try:
            with self._opening(), connecting():  # the database and its log, as one pair
                db = sqlite3.connect(_read_write_uri(self.path, "ro"), uri=True,
                                     timeout=BUSY_WAIT, check_same_thread=False)
                opened(identity_of(self.path))
                db.execute("PRAGMA schema_version").fetchone()
        except sqlite3.Error as exc:
            return not is_damaged(exc)
        self._checking = db
        try:
            return db.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok"
        except sqlite3.Error as exc:  # interrupted, locked, unreadable now: not damage
            return not is_damaged(exc)
        finally:
            self._checking = None
            db.close()

    def interrupt_check(self) -> None:
        """Stop a running ``check_pages`` (it then counts as passed)."""
        checking = self._checking
        if checking is not None:
            with contextlib.suppress(sqlite3.Error):
                checking.interrupt()

    def rebuilding(self, wait: float | None = None) -> bool:
        """Whether the index is marked as not yet holding every stored entry."""
        return bool(self.query("SELECT 1 FROM policy WHERE name = 'rebuilding'", (), wait))

    def mark_rebuilding(self, marked: bool = True) -> None:
        """Set (or, once a walk has indexed everything stored, clear) the mark."""
        with self.transaction() as db:
            if marked:
                db.execute(REBUILDING)
            else:
                db.execute("DELETE FROM policy WHERE name = 'rebuilding'")

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

    @property
    def kept(self) -> Salvage:
        """What the last file this index left still said when it was left (``_keep``)."""
        return {} if self._kept is None else self._kept[1]

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


def _read_write_uri(path: Path | str, mode: str = "rw") -> str:
    """A URI for ``path`` that never creates the file (``mode=rw``/``ro``): a connection
    must not make an empty database where the index was removed. The path is made
    absolute, not resolved: a symlink is refused before, never followed to its target."""
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"
