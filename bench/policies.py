"""Cache replacement policies simulated in memory, byte-bounded, one request at a time.

``voxcache`` replays the real policy: the score is ``voxcache.tiers.index.score`` itself
(recency plus an hour per doubling of hits), victims go lowest score first, and after a
write crosses the cap the tier is evicted down to the same low watermark as
``lifecycle.enforce``. LRU and LFU (in-cache counts, LRU tie-break) are the classic
online baselines; Belady evicts the item whose next request is furthest away, admission
included (an item never asked again is simply not kept) — the offline upper bound (exact
for equal sizes, the standard bound for variable ones).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from voxcache.tiers.index import score
from voxcache.tiers.lifecycle import Limits

from .traces import Trace, next_use

EPOCH = 1.7e9
"""Trace times are offsets; the score sees wall-clock-like seconds."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a policy achieved on a trace at one size."""

    hits: np.ndarray
    """Boolean, one per request."""

    def hit_ratio(self) -> float:
        """Share of requests served from the cache."""
        return float(self.hits.mean())

    def byte_hit_ratio(self, trace: Trace) -> float:
        """Share of requested bytes served from the cache."""
        sizes = trace.sizes[trace.items]
        return float(sizes[self.hits].sum() / sizes.sum())

    def seconds_saved(self, trace: Trace, seconds_of: np.ndarray) -> float:
        """Engine seconds not spent, given each item's render time."""
        return float(seconds_of[trace.items][self.hits].sum())


def lru(trace: Trace, capacity: int) -> Outcome:
    """Least recently used."""
    items, sizes = trace.items.tolist(), trace.sizes
    hits = np.zeros(len(items), dtype=bool)
    held: OrderedDict[int, int] = OrderedDict()
    used = 0
    for i, item in enumerate(items):
        if item in held:
            held.move_to_end(item)
            hits[i] = True
            continue
        size = int(sizes[item])
        if size > capacity:
            continue
        held[item] = size
        used += size
        while used > capacity:
            used -= held.popitem(last=False)[1]
    return Outcome(hits)


def lfu(trace: Trace, capacity: int) -> Outcome:
    """Least frequently used (counts since admission), least recent first among equals."""
    items, sizes = trace.items.tolist(), trace.sizes
    hits = np.zeros(len(items), dtype=bool)
    live: dict[int, tuple[int, int, int]] = {}  # item -> its current heap entry
    heap: list[tuple[int, int, int]] = []
    used = 0
    for i, item in enumerate(items):
        if item in live:
            count = live[item][0] + 1
            hits[i] = True
        else:
            size = int(sizes[item])
            if size > capacity:
                continue
            count = 1
            used += size
        live[item] = entry = (count, i, item)
        heapq.heappush(heap, entry)
        while used > capacity:
            used -= int(sizes[_pop_valid(heap, live)])
    return Outcome(hits)


def voxcache_policy(trace: Trace, capacity: int, limits: Limits | None = None) -> Outcome:
    """voxcache's disk tier: score = recency + 3600 s × log2(1 + hits), low watermark."""
    limits = limits or Limits(max_bytes=capacity)
    target = int(capacity * limits.low_watermark)
    items, sizes, times = trace.items.tolist(), trace.sizes, (trace.times + EPOCH).tolist()
    hits = np.zeros(len(items), dtype=bool)
    live: dict[int, tuple[float, int, int]] = {}  # item -> its current heap entry
    hit_counts: dict[int, int] = {}
    heap: list[tuple[float, int, int]] = []
    used = 0
    for i, item in enumerate(items):
        if item in live:
            hit_counts[item] += 1
            hits[i] = True
        else:
            size = int(sizes[item])
            if size > capacity:
                continue
            hit_counts[item] = 0
            used += size
        live[item] = entry = (score(times[i], hit_counts[item]), i, item)
        heapq.heappush(heap, entry)
        if used > capacity:
            while used > target:
                victim = _pop_valid(heap, live)
                del hit_counts[victim]
                used -= int(sizes[victim])
    return Outcome(hits)


def belady(trace: Trace, capacity: int) -> Outcome:
    """Evict the item asked for furthest in the future (offline optimum for equal sizes)."""
    items, sizes = trace.items.tolist(), trace.sizes
    upcoming = next_use(trace.items).tolist()
    hits = np.zeros(len(items), dtype=bool)
    state: dict[int, int] = {}  # item -> next request index
    heap: list[tuple[int, int]] = []  # (-next use, item)
    used = 0
    for i, item in enumerate(items):
        if item in state:
            hits[i] = True
        else:
            size = int(sizes[item])
            if size > capacity:
                continue
            used += size
        state[item] = upcoming[i]
        heapq.heappush(heap, (-upcoming[i], item))
        while used > capacity:
            negative, victim = heapq.heappop(heap)
            if state.get(victim) == -negative:
                del state[victim]
                used -= int(sizes[victim])
    return Outcome(hits)


def _pop_valid(heap: list, live: dict) -> int:
    """Pop stale entries (superseded by a later push) until a live one; drop and return it."""
    while True:
        entry = heapq.heappop(heap)
        item = entry[-1]
        if live.get(item) is entry:
            del live[item]
            return item


POLICIES: dict[str, Callable[[Trace, int], Outcome]] = {
    "voxcache": voxcache_policy, "LRU": lru, "LFU": lfu, "Belady (optimal)": belady}
