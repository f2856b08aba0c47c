"""Benchmark 1b: where small entries should live — LMDB, an SQLite table, files — and what a
verified disk hit costs against a plain read and python-diskcache, 100 B to 500 KB.

Issue 15 asks for disk hits within 1.5× of a plain ``open().read()`` from 100 KB up and for
small artifacts (≤ 4 KB) at least as fast as diskcache, still verified on read. The disk
tier stores small non-audio entries inline in one LMDB file (``voxcache.tiers.inline``);
this benchmark is the measurement behind that choice, taken again on every run:

- **voxcache** ``DiskTier.get``/``put`` as it is, for three kinds: ``encoded`` (the plain
  ``VXCB`` envelope, inline up to 16 KB), ``embedding`` (a safetensors file with the
  envelope in ``__metadata__``, inline up to 16 KB) and ``audio`` (a WAV, always a file);
- the two **inline store candidates** on the very same envelope bytes: LMDB
  (``InlineStore``, the store the disk tier uses) and one SQLite table (WAL, a prepared
  ``SELECT`` by key), each timed with and without ``entry.decode``; writes keep the first
  live writer, as the disk tier does, inside one write transaction;
- **python-diskcache** ``Cache.get``/``set`` of the same bytes (it keeps values under 32 KiB
  in its SQLite file, larger ones in files; it verifies nothing);
- a **plain** ``open().read()`` of a file holding the same bytes (writes: a new file).

One process times its subjects in interleaved rounds (a noisy neighbour then costs every
subject alike); four processes time one subject at a time, all on one cache folder with
their own handles, released together by a barrier, for a fixed time. Every timed read
returns the length of what it read, so a miss fails the run, and every store is checked
before timing to hold the exact bytes where the table says it does (LMDB record or file).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from voxcache import tensors
from voxcache.entry import CorruptEntry, Entry, blob_entry, decode
from voxcache.tensors import tensor_entry
from voxcache.tiers import inline
from voxcache.tiers.disk import DiskTier

from ..helpers import plots, trials
from ..helpers.core import Context, Stats, ratio
from ..helpers.fixtures import entry_of_size

NAME = "inline"
TITLE = "1b. Small entries: LMDB inline vs SQLite inline vs files vs diskcache"

SIZES = {"100 B": 100, "1 KB": 1_000, "4 KB": 4_000, "16 KB": 16_000, "100 KB": 100_000,
         "500 KB": 500_000}
"""Payload bytes; the stored form adds the envelope (~290 B; ~490 B for a tensor)."""
SMALL = ("100 B", "1 KB", "4 KB")
LARGE = ("100 KB", "500 KB")
PROCESSES = 4
KINDS = ("encoded", "embedding", "audio")

PLAIN = "open().read() (limit)"
DISKCACHE = "diskcache: Cache.get"
LMDB = "LMDB InlineStore.get + decode"
SQLITE = "SQLite inline: SELECT + decode"
LMDB_RAW = "LMDB InlineStore.get (no decode)"
SQLITE_RAW = "SQLite inline: SELECT (no decode)"
TIER_GET = {kind: f"voxcache DiskTier.get: {kind}" for kind in KINDS}
PLAIN_HOT = "open().read() of one hot file (limit)"
TIER_HOT = "voxcache DiskTier.get: audio, one hot key"
"""One key read again and again (as the ``lookup`` benchmark does): its bytes stay in the
CPU cache, so the copy is cheap and the checksum pass weighs more."""
TIER_FIRST = "voxcache DiskTier.get: embedding, header not remembered"
"""Every read as the first read of its entry: the safetensors header checked in full, not
compared with one checked before (``tensors._head``); what every hit cost before."""
KIND_OF = {**{TIER_GET[k]: k for k in KINDS}, TIER_HOT: "audio", TIER_FIRST: "embedding"}
READS = (PLAIN, PLAIN_HOT, *TIER_GET.values(), TIER_FIRST, TIER_HOT, LMDB, SQLITE, LMDB_RAW,
         SQLITE_RAW, DISKCACHE)
READS_4P = (PLAIN, TIER_GET["encoded"], TIER_GET["embedding"], LMDB, SQLITE, DISKCACHE)

W_PLAIN = "open('wb').write() of a new file (limit)"
W_DISKCACHE = "diskcache: Cache.set"
W_LMDB = "LMDB InlineStore.put"
W_SQLITE = "SQLite inline: INSERT"
TIER_PUT = {kind: f"voxcache DiskTier.put: {kind}" for kind in KINDS}
WRITES = (W_PLAIN, *TIER_PUT.values(), W_LMDB, W_SQLITE, W_DISKCACHE)
WRITES_4P = (W_PLAIN, TIER_PUT["encoded"], W_LMDB, W_SQLITE, W_DISKCACHE)
READ_OF = {W_PLAIN: PLAIN, W_DISKCACHE: DISKCACHE, W_LMDB: LMDB, W_SQLITE: SQLITE,
           **{TIER_PUT[k]: TIER_GET[k] for k in KINDS}}
"""Where a write subject stores: where its read counterpart reads from."""

SELECT = "SELECT blob FROM inline WHERE name = ?"


class SqliteInline:
    """The alternative candidate: the envelopes in one SQLite table, keyed like LMDB records.

    Set up as favourably as SQLite allows for this: WAL (readers never wait), no fsync
    (``synchronous=OFF``, as the LMDB store runs with ``sync=False``), a memory map over the
    file (reads come from the page cache, as LMDB's do) and the ``SELECT`` prepared once
    (``sqlite3``'s statement cache keeps it)."""

    def __init__(self, path: Path, create: bool = False) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30,
                                  check_same_thread=False)
        if create:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("CREATE TABLE IF NOT EXISTS inline "
                            "(name BLOB PRIMARY KEY, blob BLOB NOT NULL)")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute(f"PRAGMA mmap_size={1 << 30}")

    def get(self, name: bytes) -> bytes | None:
        row = self.db.execute(SELECT, (name,)).fetchone()
        return None if row is None else row[0]

    def put(self, name: bytes, blob: bytes, keep: Callable[[bytes], bool]) -> str:
        """``InlineStore.put``'s contract: first live writer wins, in one write transaction."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(SELECT, (name,)).fetchone()
            if row is not None and keep(row[0]):
                db.execute("COMMIT")
                return "exists"
            db.execute("INSERT OR REPLACE INTO inline (name, blob) VALUES (?, ?)", (name, blob))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return "new" if row is None else "replaced"

    def close(self) -> None:
        self.db.close()


# -- fixtures ---------------------------------------------------------------------------
def make_entry(kind: str, key: str, size: int) -> Entry:
    """A stored entry of ``kind`` whose payload is (about) ``size`` bytes."""
    if kind == "audio":
        return entry_of_size(key, size)
    if kind == "embedding":
        values = np.random.default_rng(int(key[8:24], 16)).standard_normal(max(1, size // 4))
        return tensor_entry(key, "embedding", {"embedding": values.astype(np.float32)},
                            meta={"voice": "bench"})
    return blob_entry(key, kind, os.urandom(size), "audio/mpeg", meta={"voice": "bench"})


def fresh_entries(kind: str, size: int, count: int, tag: int) -> list[Entry]:
    """``count`` entries under keys nothing else uses (``tag`` leads the random part)."""
    return [make_entry(kind, f"{tag:08x}{os.urandom(28).hex()}", size) for _ in range(count)]


def alive(key: str) -> Callable[[bytes], bool]:
    """The disk tier's first-writer-wins rule for a record already there."""
    def keep(existing: bytes) -> bool:
        try:
            return not decode(existing, key).header.expired(time.time())
        except CorruptEntry:
            return False
    return keep


@dataclass(frozen=True)
class Place:
    """One size's stores; every subject of that size reads the same keys' bytes."""

    root: Path
    keys: dict[str, list[str]] = field(default_factory=dict)
    """Stored keys by kind (``encoded`` keys are also in the candidates and the peers)."""


class Handles:
    """What one process opens on a place, each at most once (as the product opens a
    folder's disk tier and LMDB store once per process)."""

    def __init__(self, place: Place) -> None:
        self.place = place

    @cached_property
    def tier(self) -> DiskTier:
        return DiskTier(self.place.root / "voxcache", check_at_start=False)

    @cached_property
    def store(self) -> inline.InlineStore:
        store = inline.acquire(self.place.root / "lmdb")
        assert store is not None, "the LMDB candidate could not be opened"
        return store

    @cached_property
    def table(self) -> SqliteInline:
        return SqliteInline(self.place.root / "inline.sqlite")

    @cached_property
    def diskcache(self) -> Any:
        import diskcache

        return diskcache.Cache(str(self.place.root / "diskcache"))

    @property
    def files(self) -> Path:
        return self.place.root / "files"

    def close(self) -> None:
        opened = vars(self)
        if "tier" in opened:
            self.tier.close()
        if "store" in opened:
            inline.release(self.store)
        if "table" in opened:
            self.table.close()
        if "diskcache" in opened:
            self.diskcache.close()


def populate(root: Path, size: int, count: int) -> tuple[Place, Handles, dict[str, str]]:
    """Store ``count`` entries of each kind everywhere and check every store holds them
    where it should: the place, this process's handles on it, and where each subject
    keeps this size (for the tables)."""
    entries = {kind: fresh_entries(kind, size, count, i) for i, kind in enumerate(KINDS)}
    place = Place(root, {kind: [e.header.key for e in entries[kind]] for kind in KINDS})
    SqliteInline(root / "inline.sqlite", create=True).close()  # WAL set before anyone reads
    handles = Handles(place)
    handles.files.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        for entry in entries[kind]:
            assert handles.tier.put(entry)
    for entry in entries["encoded"]:
        key, blob = entry.header.key, entry.blob
        name = inline.record_name(key, "encoded")
        assert handles.store.put(name, blob, alive(key)) == "new"
        assert handles.table.put(name, blob, alive(key)) == "new"
        handles.diskcache.set(key, blob)
        (handles.files / key).write_bytes(blob)
    return place, handles, check_stores(handles, entries)


def check_stores(handles: Handles, entries: dict[str, list[Entry]]) -> dict[str, str]:
    """Every subject returns the exact stored bytes, from where we say it keeps them."""
    where: dict[str, str] = {}
    tier = handles.tier
    tier_store = inline.acquire(tier.root)  # the very handle the tier holds
    assert tier_store is not None
    try:
        for kind in KINDS:
            places = set()
            for entry in entries[kind]:
                key = entry.header.key
                got = tier.get(key, kind)
                assert got is not None and got.blob == entry.blob, f"{kind} {key}: no hit"
                on_file = os.path.exists(tier.path_of(key, kind))
                in_lmdb = tier_store.has(inline.record_name(key, kind))
                assert on_file != in_lmdb, f"{kind} {key}: file {on_file}, record {in_lmdb}"
                places.add("file" if on_file else "LMDB")
            where[TIER_GET[kind]] = describe(" and ".join(sorted(places)), entries[kind])
    finally:
        inline.release(tier_store)
    for entry in entries["encoded"]:
        key, blob = entry.header.key, entry.blob
        name = inline.record_name(key, "encoded")
        assert handles.store.get(name) == blob and handles.table.get(name) == blob
        assert handles.diskcache.get(key) == blob and (handles.files / key).read_bytes() == blob
    dc_files = any((handles.place.root / "diskcache").rglob("*.val"))
    for subject, place in ((PLAIN, "file"), (LMDB, "LMDB"), (LMDB_RAW, "LMDB"),
                           (SQLITE, "SQLite"), (SQLITE_RAW, "SQLite"),
                           (DISKCACHE, "file" if dc_files else "SQLite")):
        where[subject] = describe(place, entries["encoded"])
    where[PLAIN_HOT] = describe("file", entries["encoded"][:1])
    where[TIER_HOT] = describe("file", entries["audio"][:1])  # audio: always a file
    where[TIER_FIRST] = where[TIER_GET["embedding"]]
    return where


def describe(place: str, entries: list[Entry]) -> str:
    sizes = sorted({e.size for e in entries})
    span = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,}–{sizes[-1]:,}"
    return f"{place}, {span} B"


# -- subjects: one call per subject, the same in one process and in the workers ---------
def reader(subject: str, handles: Handles, offset: int = 0) -> Callable[[], int]:
    """A call that reads the next stored key (cycling from ``offset``) and returns the
    length it read. A miss raises (``None`` has no length)."""
    kind = KIND_OF.get(subject, "encoded")
    keys = handles.place.keys[kind]
    keys = keys[:1] if subject in (PLAIN_HOT, TIER_HOT) else keys[offset:] + keys[:offset]
    nxt = itertools.cycle(keys).__next__
    if subject in (PLAIN, PLAIN_HOT):
        folder = handles.files

        def plain() -> int:
            with open(folder / nxt(), "rb") as f:
                return len(f.read())
        return plain
    if subject == TIER_FIRST:
        tier, remembered = handles.tier, tensors._HEAD_MEMO_MAX

        def first_read() -> int:
            tensors._HEAD_MEMO_MAX = -1  # no header is remembered (nor looked up)
            try:
                return len(tier.get(nxt(), kind).blob)  # type: ignore[union-attr]
            finally:
                tensors._HEAD_MEMO_MAX = remembered
        return first_read
    if subject in KIND_OF:
        tier = handles.tier
        return lambda: len(tier.get(nxt(), kind).blob)  # type: ignore[union-attr]
    if subject == DISKCACHE:
        dc = handles.diskcache
        return lambda: len(dc.get(nxt()))
    names = {k: inline.record_name(k, "encoded") for k in keys}
    get = handles.store.get if subject in (LMDB, LMDB_RAW) else handles.table.get
    if subject in (LMDB_RAW, SQLITE_RAW):
        return lambda: len(get(names[nxt()]))  # type: ignore[arg-type]

    def verified() -> int:
        key = nxt()
        return decode(get(names[key]), key).size  # type: ignore[arg-type]
    return verified


def writer(subject: str, handles: Handles, entries: list[Entry]) -> Callable[[], Any]:
    """A call that stores the next of ``entries`` (new keys); a refused write raises."""
    nxt = iter(entries).__next__
    if subject == W_PLAIN:
        folder = handles.place.root / "files-written"
        folder.mkdir(exist_ok=True)

        def plain() -> int:
            entry = nxt()
            with open(folder / entry.header.key, "wb") as f:
                return f.write(entry.blob)
        return plain
    if subject in TIER_PUT.values():
        tier = handles.tier

        def put() -> None:
            if not tier.put(nxt()):
                raise RuntimeError("DiskTier.put refused a write")
        return put
    if subject == W_DISKCACHE:
        dc = handles.diskcache

        def dc_set() -> None:
            entry = nxt()
            dc.set(entry.header.key, entry.blob)
        return dc_set
    put_into = handles.store.put if subject == W_LMDB else handles.table.put

    def candidate() -> None:
        entry = nxt()
        key = entry.header.key
        outcome = put_into(inline.record_name(key, "encoded"), entry.blob, alive(key))
        if outcome != "new":
            raise RuntimeError(f"{subject}: {outcome} for a new key")
    return candidate


def kind_written(subject: str) -> str:
    return subject.rsplit(": ", 1)[-1] if subject in TIER_PUT.values() else "encoded"


# -- one process: subjects interleaved in rounds ----------------------------------------
def interleaved(calls: dict[str, Callable[[], Any]], n: int, rounds: int
                ) -> tuple[dict[str, Stats], dict[str, list[float]]]:
    """``n`` timed calls of each subject, in ``rounds`` turns of ``n / rounds`` (the order
    flipping each turn: ``bench.trials.rounds``); also each turn's median, per subject, so a
    ratio's spread over the turns can be told."""
    for call in calls.values():
        for _ in range(3):
            call()
    samples: dict[str, list[float]] = {s: [] for s in calls}

    def turn(subject: str) -> Callable[[], float]:
        def one() -> float:
            batch = trials.per_call(calls[subject], max(1, n // rounds))
            samples[subject].extend(batch)
            return statistics.median(batch)
        return one

    medians = trials.rounds({s: turn(s) for s in calls}, rounds, warmup=0)
    return {s: Stats.of(v) for s, v in samples.items()}, medians


# -- four processes ---------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """One subject in every worker at once, for ``seconds`` (or ``calls``, if fewer)."""

    subject: str
    write: bool
    place: Place
    size: int
    seconds: float
    calls: int


def _worker(index: int, jobs: Any, results: Any, barrier: Any) -> None:
    """Run jobs until None: open the subject, wait for the others, time each call."""
    while (job := jobs.get()) is not None:
        handles = Handles(job.place)
        try:
            if job.write:
                entries = fresh_entries(kind_written(job.subject), job.size, job.calls + 3,
                                        0x1000 + index)
                call = writer(job.subject, handles, entries)
            else:
                call = reader(job.subject, handles,
                              index * len(job.place.keys["encoded"]) // PROCESSES)
            for _ in range(3):
                call()
            barrier.wait(timeout=300)
            clock = time.perf_counter
            samples = []
            started = clock()
            deadline = started + job.seconds
            for _ in range(job.calls):
                t = clock()
                call()
                samples.append(clock() - t)
                if t > deadline:
                    break
            ended = clock()
            results.put((started, ended, samples, None))
        except Exception as exc:  # tell the parent, free the others from the barrier
            barrier.abort()
            results.put((0.0, 0.0, [], f"{type(exc).__name__}: {exc}"))
        finally:
            handles.close()


@dataclass
class Concurrent:
    """Calls timed across the workers: per-call figures and the aggregate rate."""

    stats: Stats
    per_second: float


class Workers:
    """``PROCESSES`` spawned processes, kept for every job (starting Python is not free)."""

    def __init__(self) -> None:
        context = mp.get_context("spawn")
        self.barrier = context.Barrier(PROCESSES)
        self.results = context.Queue()
        self.queues = [context.Queue() for _ in range(PROCESSES)]
        self.procs = [context.Process(target=_worker, daemon=True,
                                      args=(i, q, self.results, self.barrier))
                      for i, q in enumerate(self.queues)]
        for p in self.procs:
            p.start()

    def run(self, jobs: list[Job], rounds: int) -> dict[str, Concurrent]:
        """Every job ``rounds`` times, round-robin; samples and rates pooled per subject."""
        samples: dict[str, list[float]] = {j.subject: [] for j in jobs}
        walls = dict.fromkeys(samples, 0.0)
        for _ in range(rounds):
            for job in jobs:
                for q in self.queues:
                    q.put(job)
                done = [self.results.get(timeout=900) for _ in self.procs]
                if self.barrier.broken:
                    self.barrier.reset()
                errors = [err for *_, err in done if err]
                if errors:
                    raise RuntimeError(f"{job.subject}, {PROCESSES} processes: {errors[0]}")
                samples[job.subject] += [s for _, _, batch, _ in done for s in batch]
                walls[job.subject] += max(d[1] for d in done) - min(d[0] for d in done)
        return {s: Concurrent(Stats.of(v), len(v) / walls[s]) for s, v in samples.items()}

    def close(self) -> None:
        for q in self.queues:
            q.put(None)
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


# -- the run ----------------------------------------------------------------------------
@dataclass
class Figures:
    """Everything measured for one size."""

    where: dict[str, str]
    reads: dict[str, Stats]
    writes: dict[str, Stats]
    reads_4p: dict[str, Concurrent]
    writes_4p: dict[str, Concurrent]
    turns: dict[str, list[float]] = field(default_factory=dict)
    """Each read subject's median per interleaved turn."""
    load: tuple[float, float] = (float("nan"), float("nan"))
    """The load average before and after the reads."""

    def summary(self, subject: str, baseline: str) -> trials.Summary:
        """The per-turn ratios of two read subjects."""
        return trials.Summary.of(self.turns[subject], self.turns[baseline], *self.load)


def measure_size(ctx: Context, label: str, size: int, workers: Workers | None) -> Figures:
    """Every subject on one size: reads and writes in one process, then in four."""
    large = size >= 100_000
    count = ctx.pick(16, 64) if large else ctx.pick(32, 256)
    place, handles, where = populate(ctx.scratch(label.replace(" ", "")), size, count)
    try:
        before = trials.load()
        reads, turns = interleaved({s: reader(s, handles) for s in READS},
                                   ctx.pick(300, 6000), max(ctx.repeat, ctx.pick(5, 10)))
        load = (before, trials.load())
        n = ctx.pick(15, 100 if large else 400)
        writes, _ = interleaved(
            {s: writer(s, handles, fresh_entries(kind_written(s), size, n + 3, 0x100))
             for s in WRITES}, n, ctx.pick(3, 5))
    finally:
        handles.close()
    figures = Figures(where, reads, writes, {}, {}, turns, load)
    if workers is not None:
        seconds = ctx.pick(0.05, 0.3)
        figures.reads_4p = workers.run(
            [Job(s, False, place, size, seconds, 10**9) for s in READS_4P], ctx.pick(1, 3))
        figures.writes_4p = workers.run(
            [Job(s, True, place, size, seconds, ctx.pick(20, 60 if large else 400))
             for s in WRITES_4P], ctx.pick(1, 2))
    return figures


def run(ctx: Context) -> None:
    """Measure every size; record the tables, the targets, the headline and the plot."""
    workers: Workers | None = None
    try:
        workers = Workers()
    except OSError as exc:
        ctx.note(f"four-process runs skipped: cannot start workers ({exc})")
    by_size: dict[str, Figures] = {}
    try:
        for label, size in SIZES.items():
            print(f"  {label}", flush=True)
            by_size[label] = measure_size(ctx, label, size, workers)
    finally:
        if workers is not None:
            workers.close()
    record(ctx, by_size)


def record(ctx: Context, by_size: dict[str, Figures]) -> None:
    """The tables: every subject, then the two comparisons the issue asks about."""
    ctx.table("targets", "Issues 15 and 26's targets (ratios of medians, same run)",
              target_rows(by_size))
    ctx.table("candidates", "Inline store candidates on the same envelopes: LMDB ÷ SQLite "
              "(medians below 1 and calls/s above 1: LMDB is faster)", candidate_rows(by_size),
              notes=["SQLite: one table `(name BLOB PRIMARY KEY, blob BLOB)`, WAL, "
                     "synchronous=OFF, mmap_size 1 GiB, the SELECT from sqlite3's statement "
                     "cache; LMDB: `voxcache.tiers.inline.InlineStore` (sync=False). Both "
                     "write through the disk tier's first-writer-wins check, in one write "
                     "transaction. 100 KB and 500 KB are beyond `INLINE_MAX` (16 KiB): "
                     "shown to say why."])
    ctx.table("reads", "Reads, one process (µs; ratios of medians, same run)",
              subject_rows(by_size, "reads"),
              notes=["Sizes are payload bytes; `stored` is where each store keeps it and "
                     "its stored size.",
                     "Plain read, diskcache and both candidates hold the `encoded` envelope "
                     "bytes; voxcache rows read through `DiskTier.get` (no memory tier).",
                     "Reads cycle over every stored key of the size (full run: 256; 64 from "
                     "100 KB, 32 MB at 500 KB), so large reads come from the page cache, not "
                     "the CPU cache; the `lookup` benchmark rereads one hot key, where the "
                     "checksum pass weighs more against the copy."])
    ctx.table("writes", "Writes of new keys, one process (µs; ratios of medians)",
              subject_rows(by_size, "writes"),
              notes=["`DiskTier.put` also adds the entry's index row (SQLite, WAL, "
                     "synchronous=NORMAL); nothing here calls fsync."])
    if any(f.reads_4p for f in by_size.values()):
        ctx.table("reads_4p", f"Reads, {PROCESSES} processes at once on one folder "
                  "(µs per call; calls/s across all)", concurrent_rows(by_size, "reads_4p"),
                  notes=["The machine has 2 cores: four readers share them, so p99s hold "
                         "preemption and calls/s is the machine's, not four cores'."])
        ctx.table("writes_4p", f"Writes of new keys, {PROCESSES} processes at once",
                  concurrent_rows(by_size, "writes_4p"))
    headline(ctx, by_size)
    subjects = [PLAIN, *TIER_GET.values(), SQLITE, DISKCACHE]
    ctx.plot("reads", plots.grouped_bars(
        list(by_size), {s: [by_size[g].reads[s].median * 1e6 for g in by_size]
                        for s in subjects}, "median µs (log)", "Verified reads by entry size"))


def subject_rows(by_size: dict[str, Figures], what: str) -> list[dict[str, Any]]:
    rows = []
    for label, fig in by_size.items():
        stats: dict[str, Stats] = getattr(fig, what)
        limit = stats[PLAIN if what == "reads" else W_PLAIN].median
        peer = stats[DISKCACHE if what == "reads" else W_DISKCACHE].median
        for subject, s in stats.items():
            rows.append({"size": label, "subject": subject,
                         "stored": fig.where[READ_OF.get(subject, subject)],
                         **s.us(), "× plain": ratio(s.median, limit),
                         "× diskcache": ratio(s.median, peer)})
    return rows


def concurrent_rows(by_size: dict[str, Figures], what: str) -> list[dict[str, Any]]:
    rows = []
    for label, fig in by_size.items():
        runs: dict[str, Concurrent] = getattr(fig, what)
        if not runs:
            continue
        limit = runs[PLAIN if what == "reads_4p" else W_PLAIN]
        peer = runs[DISKCACHE if what == "reads_4p" else W_DISKCACHE]
        for subject, c in runs.items():
            rows.append({"size": label, "subject": subject, **c.stats.us(),
                         "calls/s": round(c.per_second),
                         "× plain": ratio(c.stats.median, limit.stats.median),
                         "× diskcache": ratio(c.stats.median, peer.stats.median)})
    return rows


def candidate_rows(by_size: dict[str, Figures]) -> list[dict[str, Any]]:
    rows = []
    for label, fig in by_size.items():
        pairs: list[tuple[str, Any, Any]] = [
            ("read, no decode (1 process)", fig.reads[LMDB_RAW], fig.reads[SQLITE_RAW]),
            ("read + decode (1 process)", fig.reads[LMDB], fig.reads[SQLITE]),
            ("write (1 process)", fig.writes[W_LMDB], fig.writes[W_SQLITE])]
        if fig.reads_4p:
            pairs += [(f"read + decode ({PROCESSES} processes)", fig.reads_4p[LMDB],
                       fig.reads_4p[SQLITE]),
                      (f"write ({PROCESSES} processes)", fig.writes_4p[W_LMDB],
                       fig.writes_4p[W_SQLITE])]
        for op, lmdb_m, sqlite_m in pairs:
            lmdb_s = getattr(lmdb_m, "stats", lmdb_m)
            sqlite_s = getattr(sqlite_m, "stats", sqlite_m)
            rates = isinstance(lmdb_m, Concurrent)
            rows.append({"size": label, "operation": op,
                         "LMDB median_us": lmdb_s.median * 1e6,
                         "SQLite median_us": sqlite_s.median * 1e6,
                         "LMDB p99_us": lmdb_s.p99 * 1e6, "SQLite p99_us": sqlite_s.p99 * 1e6,
                         "LMDB ÷ SQLite": ratio(lmdb_s.median, sqlite_s.median),
                         "calls/s LMDB ÷ SQLite": ratio(lmdb_m.per_second,
                                                        sqlite_m.per_second) if rates else ""})
    return rows


TARGETS = {
    LARGE: (1.5, [(TIER_GET["audio"], PLAIN), (TIER_HOT, PLAIN_HOT),
                  (TIER_GET["encoded"], PLAIN), (TIER_GET["embedding"], PLAIN)]),
    SMALL: (0.8, [(TIER_GET["encoded"], DISKCACHE), (TIER_GET["embedding"], DISKCACHE)]),
}
"""Disk hit ÷ plain read at ≥ 100 KB (≤ 1.5×, issue 15), small hit ÷ diskcache (≤ 0.8×,
issue 26; it was ≤ 1.0× in issue 15)."""


def target_rows(by_size: dict[str, Figures]) -> list[dict[str, Any]]:
    rows = []
    for label, fig in by_size.items():
        for sizes, (target, pairs) in TARGETS.items():
            if label in sizes:
                rows += target_rows_of(label, fig, target, pairs)
    return rows


def target_rows_of(label: str, fig: Figures, target: float,
                   pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    rows = []
    for subject, base in pairs:
        turns = fig.summary(subject, base) if subject in fig.turns else None
        spread = (f"{turns.median:.3f} ({min(turns.ratios):.3f}–{max(turns.ratios):.3f}, "
                  f"{len(turns.ratios)} rounds)") if turns and turns.ratios else ""
        measured = [("1", fig.reads[subject].median, fig.reads[base].median)]
        if subject in fig.reads_4p and base in fig.reads_4p:
            measured.append((str(PROCESSES), fig.reads_4p[subject].stats.median,
                             fig.reads_4p[base].stats.median))
        for procs, hit, baseline in measured:
            value = ratio(hit, baseline)
            rows.append({"size": label, "hit": subject.removeprefix("voxcache "),
                         "stored": fig.where[subject], "processes": procs,
                         "hit_us": hit * 1e6, "÷": base, "baseline_us": baseline * 1e6,
                         "ratio": value,
                         "per-round ratio: median (min–max)": spread if procs == "1" else "",
                         "target": f"≤ {target}",
                         "met": "yes" if value <= target else "NO"})
    return rows


def headline(ctx: Context, by_size: dict[str, Figures]) -> None:
    """The ratios the issue tracks, each the median of its interleaved turns."""
    for label, (hit_name, plain_name, how) in itertools.product(
            LARGE, ((TIER_GET["audio"], PLAIN, "audio files, keys cycling"),
                    (TIER_HOT, PLAIN_HOT, "one hot audio file"))):
        reads = by_size[label].reads
        hit, plain = reads[hit_name].median, reads[plain_name].median
        ctx.trials(f"DiskTier hit ÷ plain read ({label}, {how})",
                   by_size[label].summary(hit_name, plain_name),
                   f"{hit * 1e6:.1f} µs vs open().read() {plain * 1e6:.1f} µs (medians)")
    for kind in ("encoded", "embedding"):
        subject = TIER_GET[kind]
        worst = max(SMALL, key=lambda g: by_size[g].summary(subject, DISKCACHE).median)
        reads = by_size[worst].reads
        ctx.trials(f"small {kind} hit ÷ diskcache (worst of ≤ 4 KB)",
                   by_size[worst].summary(subject, DISKCACHE),
                   f"{worst}: {reads[subject].median * 1e6:.1f} µs vs "
                   f"{reads[DISKCACHE].median * 1e6:.1f} µs (medians)")
    small = [by_size[g] for g in (*SMALL, "16 KB")]
    for op, lmdb_name, sqlite_name, attr in (("read + decode", LMDB, SQLITE, "reads"),
                                             ("write", W_LMDB, W_SQLITE, "writes")):
        ratios = [ratio(getattr(f, attr)[lmdb_name].median, getattr(f, attr)[sqlite_name].median)
                  for f in small]
        ctx.headline[f"LMDB ÷ SQLite inline, {op} (100 B–16 KB, 1 process)"] = {
            "value": statistics.median(ratios),
            "detail": f"median of the four sizes; range {min(ratios):.2f}–{max(ratios):.2f} "
                      "(a choice made once, not a target: not repeated)"}
