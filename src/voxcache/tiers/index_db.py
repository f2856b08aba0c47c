"""The index database as a file: opening it safely, noticing when it is replaced or
damaged, and running statements with bounded waits.

Every statement first checks that the path still names the file its connection opened,
so an index removed or replaced under a running process is noticed at once
(``IndexFile._connect``); the queries on the disk tier's tables are ``tiers.index``'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from ..fsmode import locked, private_sqlite
from .eviction import score
from .index_file import Identity, connecting, identity_of, opened, problem_of
from .index_schema import DURABLE_TABLES, MIGRATIONS, REBUILDING, SCHEMA, Salvage, salvage

BUSY_WAIT = 5.0
"""Seconds a maintenance statement waits for another process's write lock."""
REQUEST_WAIT = 0.2
"""Seconds a statement on a request's path waits: a locked index must not stall a request
(it used to wait 30 s, then fail); what cannot be written in time is deferred."""


def is_damaged(exc: BaseException) -> bool:
    """True for SQLite errors that mean the file itself is damaged (not locked or full)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc).lower()
    return not isinstance(exc, sqlite3.OperationalError) or "malformed" in text or (
        "not a database" in text)


class IndexFile:
    """The index database; one connection per thread, WAL mode."""

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
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
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
            target = self.path if self._uri else read_write_uri(self.path)
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
                db = sqlite3.connect(read_write_uri(self.path, "ro"), uri=True,
                                     timeout=BUSY_WAIT, check_same_thread=False)
                opened(identity_of(self.path))
                db.execute("PRAGMA schema_version").fetchone()
        except sqlite3.Error as exc:
            return not is_damaged(exc)
        self._checking = db
        try:
            return bool(db.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok")
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

    def connection(self, wait: float | None = None) -> sqlite3.Connection:
        """This thread's connection, its statements waiting at most ``wait`` for a lock
        (several reads in a row; the folder's other stores use it)."""
        db = self._connect()
        self._waiting(db, wait)
        return db

    def query(self, sql: str, args: Iterable[Any] = (), wait: float | None = None
              ) -> list[tuple[Any, ...]]:
        """Run a read-only query."""
        db = self._connect()
        self._waiting(db, wait)
        return db.execute(sql, tuple(args)).fetchall()

    @property
    def kept(self) -> Salvage:
        """What the last file this index left still said when it was left (``_keep``)."""
        return {} if self._kept is None else self._kept[1]

    @classmethod
    def in_memory(cls) -> Self:
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


def read_write_uri(path: Path | str, mode: str = "rw") -> str:
    """A URI for ``path`` that never creates the file (``mode=rw``/``ro``): a connection
    must not make an empty database where the index was removed. The path is made
    absolute, not resolved: a symlink is refused before, never followed to its target."""
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"
