"""What every worker of one service has counted, kept where all of them can add and read it.

A scrape reaches one ``--workers`` process at random, so each publishes what it counted into
the index database (``history_*``): ``totals`` per worker (summed for ``/metrics``; an exited
worker's are kept as ``retired``, so counters never go down), ``deltas`` per time bucket
(the dashboard's charts) and ``levels`` (gauges and the folder's counters). An accelerator,
never a dependency: when the tables fail the caller uses its own figures, counts
``history_errors``, and damage starts the index's repair.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from ..tiers.index import Index, is_damaged
from ..tiers.openers import alive

RETIRED = "retired"
"""The worker row that keeps the totals of workers that have exited."""
FOLDER = "folder"
"""The ``levels`` worker that holds the cache folder's own figures (the same for everyone)."""
REQUEST_WAIT = 0.2
"""Seconds a scrape or a dashboard poll waits for another worker's write."""
SAMPLER_WAIT = 2.0
"""Seconds the background sampler waits for another worker's write."""

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
    """This worker's view of the shared history (tables of the folder's index database)."""

    def __init__(self, index: Index, interval: float, window: float,
                 report: Callable[[str, BaseException, str], None] | None = None,
                 clock: Callable[[], float] = time.time,
                 damaged: Callable[[], object] | None = None) -> None:
        self.index = index
        self._damaged = damaged
        self.interval = interval
        self.window = window
        self.worker = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._report = report
        self._clock = clock
        self._lock = threading.Lock()
        self._published: dict[Sample, float] = {}
        self._started = clock()

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
            known = db.execute("SELECT 1 FROM history_workers WHERE worker = ?",
                               (self.worker,)).fetchone() is not None
            before = self._published if known else {}
            deltas = {key: value - before.get(key, 0.0) for key, value in counters.items()
                      if value != before.get(key, 0.0)}
            rows = [(encode(key), value) for key, value in deltas.items()]
            db.execute("INSERT INTO history_workers VALUES (?, ?, ?, ?) ON CONFLICT(worker) DO "
                       "UPDATE SET seen = excluded.seen",
                       (self.worker, os.getpid(), self._started, now))
            db.executemany("INSERT INTO history_totals VALUES (?, ?, ?) ON CONFLICT(worker, "
                           "sample) DO UPDATE SET value = value + excluded.value",
                           [(self.worker, name, value) for name, value in rows])
            db.executemany("INSERT INTO history_deltas VALUES (?, ?, ?) ON CONFLICT(bucket, "
                           "sample) DO UPDATE SET value = value + excluded.value",
                           [(bucket, name, value) for name, value in rows])
            db.executemany("INSERT OR REPLACE INTO history_levels VALUES (?, ?, ?, ?)",
                           [(bucket, self.worker, encode(key), value)
                            for key, value in gauges.items()])
            if folder is not None:
                db.executemany("INSERT OR REPLACE INTO history_levels VALUES (?, ?, ?, ?)",
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
            db.execute("DELETE FROM history_deltas WHERE bucket < ?", (oldest,))
            db.execute("DELETE FROM history_levels WHERE bucket < ?", (oldest,))
            quiet_since = now - max(60.0, 10 * self.interval)
            for worker, pid in db.execute(
                    "SELECT worker, pid FROM history_workers WHERE seen < ? AND worker != ?",
                    (quiet_since, self.worker)).fetchall():
                if alive(pid):
                    continue  # stalled, not gone: a worker's row is folded only once it exits
                db.execute("INSERT INTO history_totals SELECT ?, sample, value FROM "
                           "history_totals WHERE worker = ? ON CONFLICT(worker, sample) "
                           "DO UPDATE SET value = value + excluded.value", (RETIRED, worker))
                db.execute("DELETE FROM history_totals WHERE worker = ?", (worker,))
                db.execute("DELETE FROM history_workers WHERE worker = ?", (worker,))

    # -- reading ----------------------------------------------------------------------
    def totals(self) -> dict[Sample, float]:
        """Every worker's counter samples summed (exited workers included)."""
        with self._reading() as db:
            rows = db.execute("SELECT sample, SUM(value) FROM history_totals "
                              "GROUP BY sample").fetchall()
        return {decode(name): value for name, value in rows}

    def workers(self) -> list[dict[str, Any]]:
        """The workers seen within three intervals, with their own counter totals."""
        since = self._clock() - max(3 * self.interval, 2.0)
        with self._reading() as db:
            found = db.execute("SELECT worker, pid, started, seen FROM history_workers "
                               "WHERE seen >= ? ORDER BY started", (since,)).fetchall()
            out: list[dict[str, Any]] = []
            for worker, pid, started, seen in found:
                totals = {decode(name): value for name, value in db.execute(
                    "SELECT sample, value FROM history_totals WHERE worker = ?", (worker,))}
                out.append({"worker": worker, "pid": pid, "started": started, "seen": seen,
                            "self": worker == self.worker, "totals": totals})
        return out

    def other_gauges(self) -> dict[Sample, float]:
        """The latest gauges of every other live worker, summed."""
        since = self._clock() - max(3 * self.interval, 2.0)
        with self._reading() as db:
            rows = db.execute(
                "SELECT l.sample, SUM(l.value) FROM history_levels l JOIN (SELECT worker, "
                "MAX(bucket) AS b FROM history_levels WHERE worker NOT IN (?, ?) GROUP BY "
                "worker) m ON l.worker = m.worker AND l.bucket = m.b JOIN history_workers w "
                "ON w.worker = l.worker "
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
                    "SELECT bucket, sample, value FROM history_deltas WHERE bucket >= ?",
                    (since,)):
                deltas.setdefault(bucket, {})[decode(name)] = value
            for bucket, name, value in db.execute(
                    "SELECT bucket, sample, SUM(value) FROM history_levels WHERE bucket >= ? "
                    "GROUP BY bucket, sample", (since,)):
                levels.setdefault(bucket, {})[decode(name)] = value
        return deltas, levels

    # -- the database ---------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(self, wait: float) -> Iterator[sqlite3.Connection]:
        with self._failing_open(), self.index.transaction(wait) as db:
            yield db

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._failing_open():
            yield self.index.connection(REQUEST_WAIT)

    @contextlib.contextmanager
    def _failing_open(self) -> Iterator[None]:
        """Any failure becomes ``HistoryUnavailable``, counted and logged; damage starts
        the index's repair (the history is a table of the index database)."""
        try:
            yield
        except (OSError, sqlite3.Error) as exc:
            if self._report is not None:
                self._report("history", exc, "the dashboard history could not be used; "
                             "figures from this worker alone until it can")
            if is_damaged(exc) and self._damaged is not None:
                self._damaged()
            raise HistoryUnavailable(str(exc)) from exc


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
