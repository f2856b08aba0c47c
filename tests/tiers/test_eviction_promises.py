"""The eviction policy's standing promises, held through the real Cache and its caps.

Its memory is bounded (ghosts at most ``GHOSTS_PER_ENTRY`` per stored entry, whatever
streams through); nothing starves (a new hot set displaces one nobody asks for any more,
however often that one was asked); the same requests give the same victims and clock.
Cost awareness is held by ``test_eviction_policy``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache, CacheConfig
from voxcache.entry import Entry, audio_entry
from voxcache.tiers.eviction import GHOSTS_PER_ENTRY


def take(i: int, frames: int = 1000) -> Entry:
    pcm = np.full(frames, i % 30_000, dtype="<i2").tobytes()
    return audio_entry(f"{i:064x}", Audio(pcm, 16000), now=1.0)


UNIT = take(0).size


@pytest.fixture
def open_cache(tmp_path: Path) -> Iterator[Callable[[str], Cache]]:
    opened: list[Cache] = []

    def make(name: str) -> Cache:
        cache = Cache(tmp_path / name, CacheConfig(memory_default_budget=0,
                                                   disk_max_bytes=10 * UNIT),
                      clock=lambda: 1_700_000_000.0)
        opened.append(cache)
        return cache

    yield make
    for cache in opened:
        cache.close()


def request(cache: Cache, entry: Entry) -> bool:
    """A hit, or a miss stored; True on a hit."""
    if cache.get(entry.header.key) is not None:
        return True
    assert cache.put(entry)
    return False


def one(cache: Cache, sql: str) -> float:
    return cache.folder.index.query(sql)[0][0]


def test_ghosts_stay_bounded_by_the_entries_whatever_streams_through(open_cache) -> None:
    cache = open_cache("a")
    for i in range(400):  # 40 times the tier, every key new
        request(cache, take(i))
        entries = one(cache, "SELECT count(*) FROM entries")
        ghosts = one(cache, "SELECT count(*) FROM ghosts")
        assert ghosts <= GHOSTS_PER_ENTRY * entries, (i, ghosts, entries)
    assert one(cache, "SELECT count(*) FROM ghosts") > 0  # it does remember some


def test_a_new_hot_set_displaces_one_nobody_asks_for_any_more(open_cache) -> None:
    cache = open_cache("a")
    old = [take(i) for i in range(8)]
    for entry in old:
        request(cache, entry)
        for _ in range(20):
            assert request(cache, entry)
    new = [take(100 + i) for i in range(8)]
    for _ in range(40):  # each new take asked 40 times, the old ones never again
        for entry in new:
            request(cache, entry)
    held = {row.key for row in cache.folder.index.rows()}
    assert {e.header.key for e in new} <= held
    assert all(request(cache, e) for e in new)


def test_the_same_requests_give_the_same_victims_and_clock(open_cache) -> None:
    rng = np.random.default_rng(11)
    sequence = [int(i) for i in rng.zipf(1.3, 1500) % 60]
    outcomes = []
    for name in ("a", "b"):
        cache = open_cache(name)
        hits = [request(cache, take(i)) for i in sequence]
        cache.folder.flush()
        outcomes.append((hits, sorted(row.key for row in cache.folder.index.rows()),
                         one(cache, "SELECT value FROM policy WHERE name = 'clock'")))
    assert outcomes[0] == outcomes[1]
    assert 0 < sum(outcomes[0][0]) < len(sequence)  # some hits, some evictions
