"""Benchmark 1: the lookup path in process, for 1 KB to 5 MB entries.

A hit is what voxcache exists for, so it is compared with the limits of the machine (a
``dict`` lookup for memory, a plain ``open().read()`` of the very same file for disk) and
with what a user would otherwise install (python-diskcache, tts-cache). The voxcache disk
hit verifies the envelope (XXH3-128 over the whole file) on every read; the plain read does
not — that difference is the price of never serving a torn entry.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.request import SynthesisRequest

from ..helpers import peers, plots, trials
from ..helpers.core import Context, Stats, ratio, sample
from ..helpers.fixtures import entry_of_size

NAME = "lookup"
TITLE = "1. Lookup path in process (hits)"

SIZES = {"1 KB": 1_000, "100 KB": 100_000, "500 KB": 500_000, "5 MB": 5_000_000}
MEMORY = ("dict lookup (limit)", "voxcache memory: Cache.get",
          "voxcache memory: CachedEngine.synthesize", "tts-cache memory: await get")
DISK = ("open().read() (limit)", "voxcache disk: Cache.get", "voxcache disk: CachedEngine",
        "diskcache: Cache.get", "tts-cache disk: await get")


def repeats(ctx: Context, size: int) -> int:
    """Enough calls for a stable p99, fewer for the 5 MB case (each is ~1 ms)."""
    if size >= 5_000_000:
        return ctx.pick(30, 300)
    return ctx.pick(300, 3000)


def measure_size(ctx: Context, label: str, size: int) -> dict[str, Stats]:
    """Time every subject on one entry size."""
    n = repeats(ctx, size)
    root = ctx.scratch(f"voxcache-{size}")
    text = f"Thank you for calling, this is the {label} lookup benchmark."
    results: dict[str, Stats] = {}
    with contextlib.ExitStack() as stack:
        memory_cache = Cache(root, CacheConfig())
        stack.callback(memory_cache.close)
        disk_cache = Cache(root, CacheConfig(memory_default_budget=0))  # memory tier off
        stack.callback(disk_cache.close)
        cached = CachedEngine(ToneEngine(), memory_cache)
        cached_disk = CachedEngine(ToneEngine(), disk_cache)
        request = SynthesisRequest(text, voice="alto")
        _, key = cached.resolve_and_key(request)
        entry = entry_of_size(key, size)
        memory_cache.put(entry)
        assert cached.synthesize(request).tier == "memory"
        assert cached_disk.synthesize(request).tier == "disk"
        path = disk_cache.folder.path_of(key)
        table = {key: entry}

        def plain_read() -> bytes:
            with open(path, "rb") as f:
                return f.read()

        results["dict lookup (limit)"] = sample(lambda: table[key], n)
        results["voxcache memory: Cache.get"] = sample(lambda: memory_cache.get(key), n)
        results["voxcache memory: CachedEngine.synthesize"] = sample(
            lambda: cached.synthesize(request), n)
        results["open().read() (limit)"] = sample(plain_read, n)
        results["voxcache disk: Cache.get"] = sample(lambda: disk_cache.get(key), n)
        results["voxcache disk: CachedEngine"] = sample(lambda: cached_disk.synthesize(request), n)
        results.update(measure_peers(ctx, root.parent / f"peers-{size}", text, entry.blob, n))
        if label == HEADLINE_SIZE:
            interleaved(ctx, disk_cache, key, plain_read, cached, request, text, entry.blob)
    return results


HEADLINE_SIZE = "500 KB"


def interleaved(ctx: Context, disk_cache: Cache, key: str, plain_read: Any, cached: CachedEngine,
                request: SynthesisRequest, text: str, blob: bytes) -> None:
    """The headline ratios at 500 KB as interleaved trials (``bench.helpers.trials``): each round a
    batch of calls of the subject and one of the baseline, the batch's median its figure."""
    n = ctx.pick(50, 400)
    disk = trials.batch_median(lambda: disk_cache.get(key), n)
    summary = trials.interleave(disk, trials.batch_median(plain_read, n), ctx.repeat)
    ctx.trials(f"disk hit ÷ plain read ({HEADLINE_SIZE}, Cache.get, one hot file)", summary,
               f"Cache.get disk {summary.subject * 1e6:.1f} µs vs open().read() "
               f"{summary.baseline * 1e6:.1f} µs (medians of rounds)")
    cpu = trials.interleave(trials.batch_cpu(lambda: disk_cache.get(key), n),
                            trials.batch_cpu(plain_read, n), ctx.repeat)
    ctx.trials(f"disk hit ÷ plain read ({HEADLINE_SIZE}, Cache.get, one hot file), CPU time",
               cpu, f"Cache.get disk {cpu.subject * 1e6:.1f} µs vs open().read() "
               f"{cpu.baseline * 1e6:.1f} µs of CPU per call (means of rounds)")
    try:
        on_disk = peers.tts_cache_disk(ctx.scratch("tts-cache-trials"))
        in_memory = peers.tts_cache_memory()
    except ImportError:
        return
    m = ctx.pick(20, 100)
    for name, tc, ours in (("disk", on_disk, disk),
                           ("memory", in_memory,
                            trials.batch_median(lambda: cached.synthesize(request), n))):
        tc.put_sync(text, blob)

        def peer(tc: Any = tc) -> float:
            return peers.async_sample(lambda: tc.get(text), m).median

        summary = trials.interleave(ours, peer, ctx.repeat)
        ctx.trials(f"voxcache hit ÷ tts-cache hit ({HEADLINE_SIZE}, {name})", summary,
                   f"{summary.subject * 1e6:.1f} µs vs {summary.baseline * 1e6:.1f} µs "
                   "(medians of rounds)")
        tc.close()


def measure_peers(ctx: Context, root: Path, text: str, blob: bytes, n: int) -> dict[str, Stats]:
    """python-diskcache and tts-cache on the same bytes (the whole WAV file)."""
    results: dict[str, Stats] = {}
    try:
        dc = peers.diskcache_at(root / "diskcache")
    except ImportError:
        ctx.note("python-diskcache is not installed (pip install 'voxcache[bench]'); skipped")
    else:
        with dc:
            dc.set("k", blob)
            assert dc.get("k") == blob
            results["diskcache: Cache.get"] = sample(lambda: dc.get("k"), n)
    try:
        on_disk = peers.tts_cache_disk(root / "tts-cache")
        in_memory = peers.tts_cache_memory()
    except ImportError:
        ctx.note("tts-cache is not installed (pip install 'voxcache[bench]'); skipped")
        return results
    for name, tc in (("tts-cache disk: await get", on_disk),
                     ("tts-cache memory: await get", in_memory)):
        tc.put_sync(text, blob)
        assert tc.get_sync(text) == blob
        results[name] = peers.async_sample(lambda tc=tc: tc.get(text), n)
        tc.close()
    return results


def run(ctx: Context) -> None:
    """Measure every size, record the table, the headline ratios and the plot."""
    rows: list[dict[str, Any]] = []
    by_size: dict[str, dict[str, Stats]] = {}
    for label, size in SIZES.items():
        stats = measure_size(ctx, label, size)
        by_size[label] = stats
        read = stats["open().read() (limit)"].median
        lookup = stats["dict lookup (limit)"].median
        for subject in (*MEMORY, *DISK):
            s = stats.get(subject)
            if s is None:
                continue
            rows.append({"size": label, "subject": subject, **s.us(),
                         "× dict": ratio(s.median, lookup),
                         "× open().read()": ratio(s.median, read)})
    ctx.table("lookup", "Hit latency by entry size (µs; ratios of medians, same run)", rows,
              notes=["voxcache disk hits ran with the memory tier switched off; every disk hit "
                     "reads and checksums the whole file.",
                     "tts-cache and diskcache store the same WAV bytes; tts-cache is timed with "
                     "`await cache.get(text)` inside one event loop (its native API)."])
    subjects = [s for s in (*MEMORY, *DISK) if all(s in v for v in by_size.values())]
    ctx.plot("latency", plots.grouped_bars(
        list(SIZES), {s: [by_size[g][s].median * 1e6 for g in SIZES] for s in subjects},
        "median µs (log)", "Hit latency by entry size"))
