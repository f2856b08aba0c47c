"""What every worker of one service has counted, kept where all of them can add and read it.

``voxcache serve --workers N`` runs N processes, each with its own Prometheus
counters, render slots and memory tier. A scrape or a dashboard poll reaches one
of them at random, so neither may show that process's figures alone: the totals
would jump from worker to worker (Prometheus reads a smaller value as a counter
reset) and the dashboard would show a fraction of the traffic. Each worker
therefore *publishes* what it counted into a small SQLite file in the cache
folder, ``history.sqlite3`` (0600, WAL), which every worker sums:

- ``totals``: per worker, its counter samples since it started; the sum over
  workers is what ``/metrics`` exports, so every scrape sees the same totals
  whichever worker answers. The answering worker publishes first, so its own
  figures are exact; another's lag by at most one sampling interval. A worker
  that has exited leaves its totals in a ``retired`` row (counters never go down).
- ``deltas``: per time bucket (one sampling interval), what all workers added
  during it — the bounded ring the dashboard's charts are drawn from.
- ``levels``: per time bucket and worker, gauges (renders running and queued,
  memory held) and the cache folder's own persisted counters (worker ``folder``:
  every worker reads the same index, so the last writer's copy is as good as any).

The file is an accelerator for figures, never a dependency: when it cannot be
opened or written (a full disk, a read-only folder, a lock held too long, a
damaged file, a symlink planted at its name) the caller falls back to this
process's own figures, the fault is counted as ``history_errors`` and logged
once per cause, and a damaged file is moved to ``quarantine/`` and started anew.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..fsmode import private_dirs, private_sqlite
from ..tiers.sessions import alive

DB_NAME = "history.sqlite3"
RETIRED = "retired"
"""The worker row that keeps the totals of workers that have exited."""
FOLDER = "folder"
"""The ``levels`` worker that holds the cache folder's own figures (the same for everyone)."""
REQUEST_WAIT = 0.2
"""Seconds a scrape or a dashboard poll waits for another worker's write."""
SAMPLER_WAIT = 2.0
"""Seconds the background sampler waits for another worker's write."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS workers (worker TEXT PRIMARY KEY, pid INTEGER NOT NULL,
    started REAL NOT NULL, seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS totals (worker TEXT NOT NULL, sample TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (worker, sample)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deltas (bucket INTEGER NOT NULL, sample TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (bucket, sample)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS levels (bucket INTEGER NOT NULL, worker TEXT NOT NULL,
    sample TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (bucket, worker, sample))
    WITHOUT ROWID;
"""

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels]
"""One Prometheus sample's identity: its name and its sorted labels."""


class HistoryUnavailable(Exception):
    """The history file cannot be used now; callers fall back to this process's figures."""


def sample(name: str, **labels: str) -> Sample:
    """A sample identity from keyword labels."""
    return name, tuple(sorted(labels.items()))


def encode(key: Sample) -> str:
    """The text a sample identity is stored under."""
    return json.dumps([key[0], [list(pair) for pair in key[1]]], separators=(",", ":"))


@lru_cache(maxsize=8192)
def decode(text: str) -> Sample:
    """A stored sample identity (memoised: the same few hundred names come back on every
    read)."""
    name, labels = json.loads(text)
    return str(name), tuple((str(k), str(v)) for k, v in labels)


class History:
    """This worker's view of the shared history file."""

    def __init__(self, root: Path, interval: float, window: float,
                 report: Callable[[str, BaseException, str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(root) / DB_NAME
        self.interval = interval
        self.window = window
        self.worker = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._report = report
        self._clock = clock
        self._lock = threading.Lock()
        self._published: dict[Sample, float] = {}
        self._started = clock()
        self._local = threading.local()

    # -- time buckets ---------------------------------------------------------------
    def bucket_of(self, when: float) -> int:
        """The bucket (its start, in milliseconds) that ``when`` falls in."""
        step = max(1, round(self.interval * 1000))
        return int(when * 1000) // step * step

    # -- writing ----------------------------------------------------------------------
    def publish(self, counters: Mapping[Sample, float], gauges: Mapping[Sample, float],
                folder: Mapping[Sample, float] | None = None, wait: float = REQUEST_WAIT
                ) -> None:
        """Add what this worker counted since its last publication to its totals and to the
        current bucket; record its gauges (and, from the sampler, the folder's figures).

        ``counters`` are this process's cumulative counter samples. Raises
        ``HistoryUnavailable`` (after counting and logging the fault); what was not
        written is published with the next call, so nothing is lost or counted twice.
        """
        now = self._clock()
        bucket = self.bucket_of(now)
        with self._lock, self._transaction(wait) as db:
            # No row of ours: the file is new (it was deleted or found damaged), so it gets
            # our whole count, not just what came since we last wrote to the old one.
            known = db.execute("SELECT 1 FROM workers WHERE worker = ?",
                               (self.worker,)).fetchone() is not None
            before = self._published if known else {}
            deltas = {key: value - before.get(key, 0.0) for key, value in counters.items()
                      if value != before.get(key, 0.0)}
            rows = [(encode(key), value) for key, value in deltas.items()]
            db.execute("INSERT INTO workers VALUES (?, ?, ?, ?) ON CONFLICT(worker) DO "
                       "UPDATE SET seen = excluded.seen",
                       (self.worker, os.getpid(), self._started, now))
            db.executemany("INSERT INTO totals VALUES (?, ?, ?) ON CONFLICT(worker, sample) "
                           "DO UPDATE SET value = value + excluded.value",
                           [(self.worker, name, value) for name, value in rows])
            db.executemany("INSERT INTO deltas VALUES (?, ?, ?) ON CONFLICT(bucket, sample) "
                           "DO UPDATE SET value = value + excluded.value",
                           [(bucket, name, value) for name, value in rows])
            db.executemany("INSERT OR REPLACE INTO levels VALUES (?, ?, ?, ?)",
                           [(bucket, self.worker, encode(key), value)
                            for key, value in gauges.items()])
            if folder is not None:
                db.executemany("INSERT OR REPLACE INTO levels VALUES (?, ?, ?, ?)",
                               [(bucket, FOLDER, encode(key), value)
                                for key, value in folder.items()])
            # Only once the transaction commits (a failure leaves these for the next call).
            published = dict(counters)
        self._published = published

    def trim(self, wait: float = SAMPLER_WAIT) -> None:
        """Drop buckets older than the window and fold exited workers into ``retired``."""
        now = self._clock()
        oldest = self.bucket_of(now - self.window)
        with self._transaction(wait) as db:
            db.execute("DELETE FROM deltas WHERE bucket < ?", (oldest,))
            db.execute("DELETE FROM levels WHERE bucket < ?", (oldest,))
            quiet_since = now - max(60.0, 10 * self.interval)
            for worker, pid in db.execute(
                    "SELECT worker, pid FROM workers WHERE seen < ? AND worker != ?",
                    (quiet_since, self.worker)).fetchall():
                if alive(pid):
                    continue  # stalled, not gone: a worker's row is folded only once it exits
                db.execute("INSERT INTO totals SELECT ?, sample, value FROM totals WHERE "
                           "worker = ? ON CONFLICT(worker, sample) DO UPDATE SET "
                           "value = value + excluded.value", (RETIRED, worker))
                db.execute("DELETE FROM totals WHERE worker = ?", (worker,))
                db.execute("DELETE FROM workers WHERE worker = ?", (worker,))

    # -- reading ----------------------------------------------------------------------
    def totals(self) -> dict[Sample, float]:
        """Every worker's counter samples summed (exited workers included)."""
        with self._reading() as db:
            rows = db.execute("SELECT sample, SUM(value) FROM totals GROUP BY sample").fetchall()
        return {decode(name): value for name, value in rows}

    def workers(self) -> list[dict[str, Any]]:
        """The workers seen within three intervals, with their own counter totals."""
        since = self._clock() - max(3 * self.interval, 2.0)
        with self._reading() as db:
            found = db.execute("SELECT worker, pid, started, seen FROM workers WHERE seen >= ? "
                               "ORDER BY started", (since,)).fetchall()
            out: list[dict[str, Any]] = []
            for worker, pid, started, seen in found:
                totals = {decode(name): value for name, value in db.execute(
                    "SELECT sample, value FROM totals WHERE worker = ?", (worker,))}
                out.append({"worker": worker, "pid": pid, "started": started, "seen": seen,
                            "self": worker == self.worker, "totals": totals})
        return out

    def other_gauges(self) -> dict[Sample, float]:
        """The latest gauges of every other live worker, summed."""
        since = self._clock() - max(3 * self.interval, 2.0)
        with self._reading() as db:
            rows = db.execute(
                "SELECT l.sample, SUM(l.value) FROM levels l JOIN (SELECT worker, MAX(bucket) "
                "AS b FROM levels WHERE worker NOT IN (?, ?) GROUP BY worker) m ON "
                "l.worker = m.worker AND l.bucket = m.b JOIN workers w ON w.worker = l.worker "
                "WHERE w.seen >= ? GROUP BY l.sample", (self.worker, FOLDER, since)).fetchall()
        return {decode(name): value for name, value in rows}

    def buckets(self, since: int) -> tuple[dict[int, dict[Sample, float]],
                                           dict[int, dict[Sample, float]]]:
        """(deltas, levels) per bucket from ``since`` on; levels of the workers summed, the
        folder's figures under their own names."""
        deltas: dict[int, dict[Sample, float]] = {}
        levels: dict[int, dict[Sample, float]] = {}
        with self._reading() as db:
            for bucket, name, value in db.execute(
                    "SELECT bucket, sample, value FROM deltas WHERE bucket >= ?", (since,)):
                deltas.setdefault(bucket, {})[decode(name)] = value
            for bucket, name, value in db.execute(
                    "SELECT bucket, sample, SUM(value) FROM levels WHERE bucket >= ? "
                    "GROUP BY bucket, sample", (since,)):
                levels.setdefault(bucket, {})[decode(name)] = value
        return deltas, levels

    # -- the file ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(self, wait: float) -> Iterator[sqlite3.Connection]:
        with self._connection(wait) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._connection(REQUEST_WAIT) as db:
            yield db

    @contextlib.contextmanager
    def _connection(self, wait: float) -> Iterator[sqlite3.Connection]:
        """This thread's connection, opened anew when the file at the path is another one
        (deleted, or quarantined and recreated); any failure becomes ``HistoryUnavailable``
        and drops the connection. Kept open: closing the last connection to a WAL database
        checkpoints it, which would cost each poll milliseconds."""
        try:
            db = self._open()
            db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            yield db
        except (OSError, sqlite3.Error) as exc:
            self._drop()
            raise self._fault(exc) from exc

    def _open(self) -> sqlite3.Connection:
        self._check_path()
        inode = os.stat(self.path).st_ino
        held = getattr(self._local, "db", None)
        if held is not None and held[1] == inode:
            return held[0]
        self._drop()
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._local.db = (db, inode)
        db.execute("PRAGMA synchronous=NORMAL")  # figures: no fsync per publication
        self._create(db)
        return db

    def _drop(self) -> None:
        held = getattr(self._local, "db", None)
        self._local.db = None
        if held is not None:
            with contextlib.suppress(sqlite3.Error):
                held[0].close()

    def _check_path(self) -> None:
        """Refuse anything but a regular file at the history's name (a symlink planted
        there would make SQLite write wherever it points), then create it 0600."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            private_sqlite_new(self.path)
            return
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(f"{DB_NAME} in the cache folder is not a regular file")
        private_sqlite(self.path)

    def _create(self, db: sqlite3.Connection) -> None:
        """WAL and the schema, retried while another worker starting at the same instant
        holds the lock (SQLite does not wait for the switch to WAL)."""
        for attempt in range(50):
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 49:
                    raise
                time.sleep(0.02)

    def _fault(self, exc: BaseException) -> HistoryUnavailable:
        """Count and log the fault; move a damaged file aside so the next call starts anew."""
        if self._report is not None:
            self._report("history", exc, "the dashboard history could not be used; figures "
                         "from this worker alone until it can")
        if _damaged(exc):
            self._quarantine()
        return HistoryUnavailable(str(exc))

    def _quarantine(self) -> None:
        folder = self.path.parent / "quarantine"
        stamp = f"{int(self._clock())}-{secrets.token_hex(3)}"
        with contextlib.suppress(OSError):
            private_dirs(folder)
            for suffix in ("", "-wal", "-shm"):
                source = Path(f"{self.path}{suffix}")
                if source.is_symlink() or source.exists():
                    os.replace(source, folder / f"{DB_NAME}{suffix}.{stamp}")


def private_sqlite_new(path: Path) -> None:
    """Create a new database file 0600, never through a name that appeared meanwhile."""
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        os.close(fd)
    private_sqlite(path)


class NotARegularFile(OSError):
    """Something other than a regular file (a symlink, a folder, a FIFO) at the history's
    name: moved to ``quarantine/`` like a damaged file."""


def _damaged(exc: BaseException) -> bool:
    if isinstance(exc, NotARegularFile):
        return True
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and (
        "malformed" in text or "not a database" in text)


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' ``histogram_quantile``: cumulative counts per upper bound → the value
    below which ``q`` of the observations fall, interpolated linearly within a bucket."""
    bounds = sorted(buckets)
    if not bounds:
        return None
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # past the last finite bound: its value is all we know
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower
