"""Benchmark 6: scale — lookups, start-up and gc with 10 k, 100 k and 1 M entries.

A hit never consults the index (the path follows from the key), so lookup latency should
not grow with the entry count; start-up serves at once and checks the folder in the
background; gc walks the index by score. The folders are built in bulk (small payloads,
files written directly, index rows inserted with one ``executemany``) because building a
million entries through ``Cache.put`` would take longer than the whole suite may run.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3

from voxcache.audio import Audio
from voxcache.cache import Cache, CacheConfig
from voxcache.entry import audio_entry
from voxcache.tiers.index import Index, score
from voxcache.tiers.layout import entry_path
from voxcache.tiers.lifecycle import Limits, enforce

from ..helpers import plots
from ..helpers.core import Context, Stats, sample

NAME = "scale"
TITLE = "6. Scale: 10 k / 100 k / 1 M entries"

TMPFS = Path("/dev/shm")
PAYLOAD = Audio(bytes(400), 22050)
"""A ~10 ms take: the files stay small, so the 1 M folder is about 4 GB of blocks."""


def key_of(i: int) -> str:
    """The i-th synthetic key."""
    return blake3.blake3(f"scale-{i}".encode()).hexdigest()


def build(root: Path, n: int, rng: random.Random) -> float:
    """Write ``n`` entries and their index rows in bulk; return the seconds it took."""
    started = time.perf_counter()
    Cache(root).close()  # folders and schema, as voxcache makes them
    now = time.time()
    rows = []
    made: set[Path] = set()
    for i in range(n):
        key = key_of(i)
        entry = audio_entry(key, PAYLOAD, meta={"voice": "bench", "text": f"entry {i}"})
        path = entry_path(root, key, "audio")
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, entry.blob)
        os.close(fd)
        last, hits = now - rng.random() * 30 * 86_400, rng.randrange(20)
        rows.append((key, "audio", entry.size, entry.header.created, None, last, hits,
                     score(None, hits, 0.0, entry.size, 0.0), 0, None, "default", "tone", "",
                     "bench", f"entry {i}", "", 0.0))
    index = Index(root / "index.sqlite3")  # not a Cache: its start-up check would race us
    try:
        with index.transaction() as db:
            db.executemany("INSERT INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           rows)
    finally:
        index.close()
    return time.perf_counter() - started


def _wait_for_check(cache: Cache) -> float:
    """Wait for the background start-up check (if this version has one); return its seconds."""
    started = time.perf_counter()
    check = getattr(cache.folder, "startup_check", None)
    if check is not None:
        check.join()
    return time.perf_counter() - started


def plain_files(root: Path, count: int) -> list[Path]:
    """``count`` plain ~1 KB files in the same sharded layout, written with the entries so
    that both sets are equally old (the kernel's writeback changes what an unlink costs)."""
    paths = []
    for i in range(count):
        key = blake3.blake3(f"plain-{i}".encode()).hexdigest()
        path = root / "plain" / key[:2] / key[2:4] / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1000)
        paths.append(path)
    return paths


def unlink_all(paths: list[Path]) -> float:
    """Seconds to delete the files: the limit for any file-per-entry cache's gc."""
    started = time.perf_counter()
    for path in paths:
        path.unlink()
    return time.perf_counter() - started


def measure(ctx: Context, n: int, where: str) -> dict[str, Any]:
    """Build a folder of ``n`` entries and time start-up, lookups and a 10% gc."""
    if where == "tmpfs":
        with scratch_in(TMPFS) as root:
            return _measure(ctx, n, root / "cache") | {"filesystem": "tmpfs"}
    return _measure(ctx, n, ctx.scratch(f"n{n}")) | {"filesystem": "ext4 (disk)"}


@contextlib.contextmanager
def scratch_in(parent: Path) -> Iterator[Path]:
    """A temporary folder under ``parent``, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="voxcache-scale-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _measure(ctx: Context, n: int, root: Path) -> dict[str, Any]:
    rng = random.Random(n)
    # A 10% gc of 1 M entries means 100 k unlinks (minutes here): evict 1% and scale by 10.
    share = 0.01 if n >= 1_000_000 else 0.10
    evict = int(n * share)
    plain = plain_files(root.parent / "plain", evict)
    build_s = build(root, n, rng)
    opens, checks = [], []
    for _ in range(1 if n >= 1_000_000 else 3):  # a check of 1 M files takes a minute
        started = time.perf_counter()
        cache = Cache(root, CacheConfig(memory_default_budget=0))
        opens.append(time.perf_counter() - started)
        checks.append(_wait_for_check(cache))
        cache.close()
    repeats = ctx.pick(300, 2000)
    with contextlib.closing(Cache(root, CacheConfig(memory_default_budget=0))) as cache:
        _wait_for_check(cache)
        keys = iter([key_of(rng.randrange(n)) for _ in range(repeats + 10)])
        hit = sample(lambda: cache.get(next(keys)), repeats)
        absent = iter([key_of(n + i) for i in range(repeats + 10)])
        miss = sample(lambda: cache.get(next(absent)), repeats)
        probe = iter([key_of(rng.randrange(n)) for _ in range(repeats + 10)])
        row = sample(lambda: cache.folder.index.query(
            "SELECT size FROM entries WHERE key = ?", (next(probe),)), repeats)
        started = time.perf_counter()
        evicted = enforce(root, cache.folder.index, Limits(max_entries=n - evict,
                                                          low_watermark=1.0))
        gc_s = (time.perf_counter() - started) * (0.10 / share)
    plain_s = unlink_all(plain) * (0.10 / share)
    o, c = Stats.of(opens), Stats.of(checks)
    return {"entries": n, "build s": build_s, "open median_ms": o.median * 1e3,
            "start-up check s": c.median,
            "disk hit median_us": hit.median * 1e6, "disk hit p99_us": hit.p99 * 1e6,
            "miss median_us": miss.median * 1e6, "miss p99_us": miss.p99 * 1e6,
            "index row median_us": row.median * 1e6, "index row p99_us": row.p99 * 1e6,
            "gc: evict 10% s": gc_s, "plain unlink of as many files s": plain_s,
            "gc ÷ plain unlink": gc_s / plain_s if plain_s else float("nan"),
            "evicted": evicted.get("count", 0),
            "gc measured on": f"{share:.0%}" + ("" if share == 0.10 else " (×10)")}


def run(ctx: Context) -> None:
    """10 k (quick) or 10 k, 100 k and 1 M (full)."""
    cases = ctx.pick([(10_000, "disk")], [(10_000, "disk"), (10_000, "tmpfs"),
                                          (100_000, "tmpfs"), (1_000_000, "tmpfs")])
    if not TMPFS.is_dir():
        ctx.note(f"{TMPFS} is missing: every case runs on the disk (and takes much longer)")
        cases = ctx.pick([(10_000, "disk")], [(10_000, "disk"), (100_000, "disk")])
    rows = []
    for n, where in cases:
        print(f"  {n:,} entries on {where} …", flush=True)
        row = measure(ctx, n, where)
        rows.append({"entries": row.pop("entries"), "filesystem": row.pop("filesystem"), **row})
    ctx.table("scale", "Lookups, start-up and gc by entry count", rows, notes=[
        "Large cases run on tmpfs: on this VM's ext4 (mounted with `discard`) creating a small "
        "file costs ~0.4 ms and deleting one ~1.6 ms under load, so building and removing 1 M "
        "files would take over half an hour by itself. The 10 k case runs on both, to show "
        "the difference; the disk figures are the ones a deployment on such a disk sees.",
        "open = Cache() until it serves; the start-up check (index vs files, temp sweep) runs "
        "in a background thread and is timed to its end. Disk hits read ~1 KB files "
        "(memory tier off), random keys.",
        "gc = lifecycle.enforce with an entry cap 10% below the count (watermark 1.0); at 1 M "
        "it evicts 1% and the time is scaled by 10 (each eviction is one unlink, and unlinks "
        "on this shared disk cost ~1–2 ms). `plain unlink` deletes as many plain files in the "
        "same layout: the limit for any file-per-entry cache."])
    tmpfs = [r for r in rows if r["filesystem"] == "tmpfs"] or rows
    xs = [r["entries"] for r in tmpfs]
    ctx.plot("latency", plots.lines(xs, {
        "disk hit median µs": [r["disk hit median_us"] for r in tmpfs],
        "disk hit p99 µs": [r["disk hit p99_us"] for r in tmpfs],
        "miss median µs": [r["miss median_us"] for r in tmpfs],
        "index row median µs": [r["index row median_us"] for r in tmpfs]},
        "entries", "µs", "Lookup latency by entry count", logx=True, logy=True))
    ctx.plot("maintenance", plots.lines(xs, {
        "open (ms ÷ 1000)": [r["open median_ms"] / 1e3 for r in tmpfs],
        "start-up check s": [r["start-up check s"] for r in tmpfs],
        "gc evict 10% s": [r["gc: evict 10% s"] for r in tmpfs],
        "plain unlink of as many files s": [r["plain unlink of as many files s"] for r in tmpfs]},
        "entries", "seconds", "Start-up and gc by entry count", logx=True, logy=True))
