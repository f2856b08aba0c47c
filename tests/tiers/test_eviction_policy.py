"""The disk tier's eviction policy (``tiers.eviction``) through the real Cache and its caps.

What it promises: a one-off scan passes through without pushing out what is asked for; a key
evicted not long ago comes back with the frequency it had earned; what an entry is worth per
byte (engine seconds per MB) decides between entries asked alike; an index written by the old
policy is migrated, not left to outlive everything; pins hold; a forged cost earns nothing.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache, CacheConfig
from voxcache.entry import Entry, audio_entry, blob_entry
from voxcache.tiers.eviction import take_seconds


def take(i: int, frames: int = 1000, **meta: Any) -> Entry:
    """A take of ``frames`` samples; every take of the same length and meta has one size."""
    pcm = np.full(frames, i % 30_000, dtype="<i2").tobytes()
    return audio_entry(f"{i:064x}", Audio(pcm, 16000), meta=meta, now=1.0)


UNIT = take(0).size


@pytest.fixture
def clock() -> list[float]:
    return [1_700_000_000.0]


@pytest.fixture
def open_cache(cache_dir: Path, clock: list[float]) -> Iterator[Any]:
    """Caches on ``cache_dir`` with the memory tier off (every ask reaches the disk tier)."""
    opened: list[Cache] = []

    def make(max_bytes: int | None = None) -> Cache:
        cache = Cache(cache_dir, CacheConfig(memory_default_budget=0, disk_max_bytes=max_bytes),
                      clock=lambda: clock[0])
        opened.append(cache)
        return cache

    yield make
    for cache in opened:
        cache.close()


def ask(cache: Cache, entry: Entry, times: int = 1) -> None:
    for _ in range(times):
        assert cache.get(entry.header.key, entry.header.kind) is not None


def request(cache: Cache, entry: Entry) -> None:
    """What a cached engine does: a hit, or a miss rendered and stored."""
    if cache.get(entry.header.key, entry.header.kind) is None:
        assert cache.put(entry)


def stored(cache: Cache) -> set[str]:
    return {row.key for row in cache.folder.index.rows()}


def test_a_one_off_scan_passes_through_without_evicting_the_hot_set(open_cache, clock) -> None:
    cache = open_cache(10 * UNIT)
    hot = [take(i) for i in range(8)]
    for entry in hot:
        cache.put(entry)
        ask(cache, entry, 3)
    clock[0] += 3 * 3600  # the evening's batch job: 200 sentences read once, 20× the tier
    for i in range(100, 300):
        assert cache.put(take(i))
        assert cache.folder.index.totals()[0] <= 10 * UNIT
    assert {e.header.key for e in hot} <= stored(cache)
    assert cache.stats()["counters"]["evictions_size"] >= 190


def test_a_key_evicted_recently_comes_back_with_its_earned_frequency(open_cache) -> None:
    cache = open_cache(10 * UNIT)
    earned = take(1)
    cache.put(earned)
    ask(cache, earned, 4)
    pins = [take(100 + i) for i in range(10)]
    for pin in pins:  # the tenth crosses the cap: the only entry that may go is `earned`
        cache.put(pin, pinned=True)
    assert earned.header.key not in stored(cache)
    cache.delete(pins[-1].header.key)
    cache.delete(pins[-2].header.key)
    rival = take(2)  # asked twice: less than `earned` was, more than a key never seen
    cache.put(rival)
    ask(cache, rival, 2)
    assert cache.get(earned.header.key) is None  # asked again: a miss, stored again
    cache.put(earned)
    trigger = take(3, frames=200)  # crosses the cap by less than one take
    cache.put(trigger, pinned=True)
    keys = stored(cache)
    assert earned.header.key in keys
    assert rival.header.key not in keys


def test_a_small_costly_artifact_outlives_a_large_cheap_one_at_equal_asks(open_cache) -> None:
    embedding = blob_entry("e" * 64, "embedding", bytes(1024), "application/octet-stream",
                           meta={"compute_seconds": 0.8}, now=1.0)  # a speaker embedding
    large = take(1, frames=25_000, render_seconds=0.3)  # 50 KB of audio, quick to render
    trigger = take(2, frames=2_000)
    cache = open_cache(embedding.size + large.size + trigger.size - 1)
    cache.put(embedding)  # the older of the two, and asked as often
    cache.put(large)
    ask(cache, embedding, 2)
    ask(cache, large, 2)
    cache.put(trigger, pinned=True)  # one of them has to go
    keys = stored(cache)
    assert embedding.header.key in keys
    assert large.header.key not in keys
    assert cache.get(embedding.header.key, "embedding") is not None


def _make_old_index(path: Path, asks: dict[str, int]) -> None:
    """Turn ``path`` into an index as the policy before this one left it: no cost column,
    no ghosts or clock, an index by kind, and scores in seconds since 1970."""
    with sqlite3.connect(path) as db:
        db.executescript("DROP TABLE ghosts; DROP TABLE policy; "
                         "ALTER TABLE entries DROP COLUMN cost; "
                         "CREATE INDEX entries_by_kind_score ON entries(pinned, kind, score);")
        for key, hits in asks.items():
            last = 1_700_000_000.0 + hits
            db.execute("UPDATE entries SET hits = ?, last_access = ?, score = ? WHERE key = ?",
                       (hits, last, last + 3600.0 * math.log2(1 + hits), key))
    db.close()


def test_an_old_index_is_migrated_and_its_rows_do_not_outlive_every_new_take(
        cache_dir: Path, open_cache) -> None:
    cache = open_cache()
    old = [take(i) for i in range(10)]
    for entry in old:
        cache.put(entry)
    cache.close()
    _make_old_index(cache_dir / "index.sqlite3", {e.header.key: i % 3 for i, e in
                                                  enumerate(old)})
    cache = open_cache(10 * UNIT)
    columns = {row[1] for row in cache.folder.index.query("PRAGMA table_info(entries)")}
    assert "cost" in columns
    new = [take(100 + i) for i in range(10)]
    for _ in range(4):  # the day's phrases, each asked four times, in turn
        for entry in new:
            request(cache, entry)
    keys = stored(cache)
    assert keys == {e.header.key for e in new}, "old rows outlived the day's phrases"


def test_pinned_entries_are_never_evicted(open_cache) -> None:
    cache = open_cache(10 * UNIT)
    pinned = [take(i, frames=1500) for i in range(3)]  # large, cheap and never asked
    for entry in pinned:
        cache.put(entry, pinned=True)
    for i in range(100, 160):
        fresh = take(i, render_seconds=2.0)
        for _ in range(3):  # asked three times: admitted the second time at the latest
            request(cache, fresh)
        assert {e.header.key for e in pinned} <= stored(cache)
    assert cache.stats()["counters"]["evictions_size"] >= 50
    assert cache.folder.index.totals()[0] <= 10 * UNIT


FORGED = ("1e9", "NaN", "inf", -5.0, True, [30.0], {"seconds": 30.0})


def test_a_forged_cost_in_the_envelope_earns_no_credit(open_cache) -> None:
    """A render_seconds that is not a positive number counts as no cost at all: such
    entries go before an honest take that cost half a second, though it is the oldest."""
    honest = take(1, render_seconds=0.5)
    forged = [take(10 + i, render_seconds=value) for i, value in enumerate(FORGED)]
    cache = open_cache(10 * UNIT)
    for entry in (honest, *forged):
        cache.put(entry)
        ask(cache, entry)
    forged_keys = {e.header.key for e in forged}
    for i in range(60):  # small pinned takes: each round over the cap evicts one entry
        if not stored(cache) & forged_keys:
            break
        cache.put(take(100 + i, frames=200), pinned=True)
        assert honest.header.key in stored(cache)
    assert not stored(cache) & forged_keys


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0, 0.0, "2", None])
def test_a_cost_that_is_not_a_positive_number_is_no_cost(value: Any) -> None:
    assert take_seconds({"render_seconds": value}) == 0.0
    assert take_seconds({"render_seconds": value, "compute_seconds": 0.8}) == 0.8


def test_a_claimed_cost_is_held_to_an_hour() -> None:
    assert take_seconds({"render_seconds": 1e300}) == 3600.0


@pytest.mark.piper
def test_with_piper_takes_carry_their_cost_and_a_scan_passes_through(piper, tmp_path) -> None:
    """End to end with real Piper takes: each row is ranked by the engine seconds its
    envelope recorded, and a one-off scan through a full disk tier leaves the phrase asked
    all day on disk (served without a second synthesis)."""
    from voxcache.cached import CachedEngine
    from voxcache.request import SynthesisRequest

    quiet = {"noise_scale": 0.0, "noise_w_scale": 0.0}
    hot = SynthesisRequest("Your order is ready at the counter.", params=quiet)
    probe = CachedEngine(piper, Cache(tmp_path / "probe"))
    size = probe.synthesize(hot).entry.size
    probe.cache.close()
    cache = Cache(tmp_path / "cache", CacheConfig(disk_max_bytes=int(size * 4.5)))
    cached = CachedEngine(piper, cache)
    try:
        key = cached.synthesize(hot).key
        for _ in range(3):
            assert cached.synthesize(hot).cache == "hit"
        cache.folder.flush()
        for i in range(8):  # one-off announcements, each asked once
            cached.synthesize(SynthesisRequest(f"Platform {i + 2} is now closed.", params=quiet))
        cache.folder.flush()
        costs = [cost for (cost,) in cache.folder.index.query("SELECT cost FROM entries")]
        assert costs and all(cost > 0 for cost in costs)  # Piper's own render seconds
        totals = cache.folder.totals()
        assert totals is not None and totals[0] <= int(size * 4.5)
        cache.in_process.clear()
        again = cached.synthesize(hot)
        assert (again.cache, again.tier, again.key) == ("hit", "disk", key)
    finally:
        cache.close()
