"""Probe: small entries in LMDB (``tiers.inline``) against a BLOB column of the folder's
index database, the one SQLite file a cache folder now holds (issue 25).

Both subjects run on one cache folder as the disk tier opens it: LMDB through
``InlineStore``, the index through ``Index`` (its per-statement identity check, WAL,
``synchronous=NORMAL``) with a ``blobs`` table added beside ``entries``. A small write
today is an LMDB put plus the index row (two stores); with a BLOB column it would be one
index transaction holding both, so writes are timed both ways. Trials are interleaved
(every subject once per trial, in a rotating order), each trial times ``--ops`` calls per
subject; the table gives each subject's median µs per call over the trials, the spread
(min-max of the trials) and the ratio index / LMDB of the medians.

    PYTHONPATH=src python -m bench.probes.inline_vs_index [--trials 9] [--ops 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from voxcache.entry import Entry, blob_entry
from voxcache.tiers import inline
from voxcache.tiers.index import Index, IndexRow

SIZES = {"100 B": 100, "1 KB": 1_000, "4 KB": 4_000}
BLOBS = "CREATE TABLE IF NOT EXISTS blobs (name BLOB PRIMARY KEY, blob BLOB NOT NULL)"
SELECT = "SELECT blob FROM blobs WHERE name = ?"
CLOCK_AND_GHOST = ("SELECT (SELECT value FROM policy WHERE name = 'clock'), "
                   "(SELECT score FROM ghosts WHERE key = ?)")


def entries(size: int, count: int, tag: str) -> list[Entry]:
    return [blob_entry(hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(), "encoded",
                       bytes([i % 251]) * size, "application/octet-stream")
            for i in range(count)]


def row_of(entry: Entry) -> IndexRow:
    h = entry.header
    return IndexRow(h.key, h.kind, entry.size, h.created, h.expires, time.time(), 0, False,
                    None, "", "", "", "", "")


def keep_live(_existing: bytes) -> bool:
    return True


class Subjects:
    """The timed calls, each over its own list of entries (a write never hits a name twice)."""

    def __init__(self, root: Path, size: int, ops: int, trials: int) -> None:
        self.store = inline.acquire(root)
        assert self.store is not None, "LMDB could not be opened"
        self.index = Index(root / "index.sqlite3")
        with self.index.transaction() as db:
            db.execute(BLOBS)
        self.read_set = entries(size, ops, "r")
        for e in self.read_set:
            name = inline.record_name(e.header.key, e.header.kind)
            self.store.put(name, e.blob, keep_live)
            with self.index.transaction() as db:
                db.execute("INSERT OR REPLACE INTO blobs VALUES (?, ?)", (name, e.blob))
        self.names = [inline.record_name(e.header.key, e.header.kind) for e in self.read_set]
        self.size, self.ops, self.trial = size, ops, 0
        self.total_trials = trials

    def fresh(self, subject: str) -> list[Entry]:
        return entries(self.size, self.ops, f"{subject}-{self.trial}")

    def lmdb_read(self) -> Callable[[], None]:
        get, names = self.store.get, self.names  # type: ignore[union-attr]
        return lambda: [get(n) for n in names] and None

    def index_read(self) -> Callable[[], None]:
        index, names = self.index, self.names
        return lambda: [index.connection().execute(SELECT, (n,)).fetchone() for n in names] \
            and None

    def lmdb_write(self, with_row: bool) -> Callable[[], None]:
        todo, store, index = self.fresh(f"lw{int(with_row)}"), self.store, self.index

        def run() -> None:
            for e in todo:
                name = inline.record_name(e.header.key, e.header.kind)
                store.put(name, e.blob, keep_live)  # type: ignore[union-attr]
                if with_row:
                    index.add(row_of(e))
        return run

    def index_write(self, with_row: bool) -> Callable[[], None]:
        todo, index = self.fresh(f"iw{int(with_row)}"), self.index

        def run() -> None:
            for e in todo:
                name = inline.record_name(e.header.key, e.header.kind)
                with index.transaction() as db:
                    if db.execute(SELECT, (name,)).fetchone() is None:
                        db.execute("INSERT INTO blobs VALUES (?, ?)", (name, e.blob))
                if with_row:  # the same row; a real tier would write both in one transaction
                    index.add(row_of(e))
        return run

    def index_write_one_tx(self, _with_row: bool = True) -> Callable[[], None]:
        """The blob and its row in one transaction (the row as ``Index.add_many`` writes
        one: the clock and ghost looked up, then the insert)."""
        todo, index = self.fresh("i1"), self.index

        def run() -> None:
            for e in todo:
                name = inline.record_name(e.header.key, e.header.kind)
                r = row_of(e)
                with index.transaction() as db:
                    if db.execute(SELECT, (name,)).fetchone() is None:
                        db.execute("INSERT INTO blobs VALUES (?, ?)", (name, e.blob))
                    db.execute(CLOCK_AND_GHOST, (r.key,)).fetchone()
                    db.execute("INSERT OR IGNORE INTO entries VALUES "
                               "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                               (r.key, r.kind, r.size, r.created, r.expires, r.last_access,
                                0, 1.0, 0, None, "", "", "", "", "", "", 0.0))
        return run

    def close(self) -> None:
        inline.release(self.store)  # type: ignore[arg-type]
        self.index.close()


READS = {"read: LMDB get": "lmdb_read", "read: index SELECT blob": "index_read"}
WRITES = {"write: LMDB put": ("lmdb_write", False),
          "write: index INSERT blob": ("index_write", False),
          "write+row: LMDB put + index row": ("lmdb_write", True),
          "write+row: index blob + index row": ("index_write", True),
          "write+row: index blob + row, one tx": ("index_write_one_tx", True)}


def measure(size: int, ops: int, trials: int) -> dict[str, list[float]]:
    """µs per call of every subject, one value per trial."""
    per_call: dict[str, list[float]] = {s: [] for s in (*READS, *WRITES)}
    with tempfile.TemporaryDirectory(prefix="vx-inline-vs-index-") as folder:
        subjects = Subjects(Path(folder), size, ops, trials)
        try:
            order = list(per_call)
            for trial in range(trials):
                subjects.trial = trial
                turn = order[trial % len(order):] + order[:trial % len(order)]
                for subject in turn:
                    if subject in READS:
                        call = getattr(subjects, READS[subject])()
                    else:
                        method, with_row = WRITES[subject]
                        call = getattr(subjects, method)(with_row)
                    started = time.perf_counter()
                    call()
                    per_call[subject].append((time.perf_counter() - started) / ops * 1e6)
        finally:
            subjects.close()
    return per_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    pairs = [("read: index SELECT blob", "read: LMDB get"),
             ("write: index INSERT blob", "write: LMDB put"),
             ("write+row: index blob + index row", "write+row: LMDB put + index row"),
             ("write+row: index blob + row, one tx", "write+row: LMDB put + index row")]
    print(f"{'size':6} {'subject':36} {'median µs':>10} {'spread µs':>16} {'index/LMDB':>10}")
    for label, size in SIZES.items():
        got = measure(size, args.ops, args.trials)
        for index_subject, lmdb_subject in pairs:
            for subject in dict.fromkeys((lmdb_subject, index_subject)):
                values = got[subject]
                ratio = ""
                if subject == index_subject:
                    base = statistics.median(got[lmdb_subject])
                    ratio = f"{statistics.median(values) / base:.2f}×"
                print(f"{label:6} {subject:36} {statistics.median(values):10.2f} "
                      f"{min(values):7.2f}-{max(values):<8.2f} {ratio:>10}")


if __name__ == "__main__":
    main()
