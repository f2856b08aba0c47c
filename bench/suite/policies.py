"""Cache replacement policies simulated in memory, byte-bounded, one request at a time.

Every policy sees the same trace and the same byte capacity; an item larger than the
capacity is never stored. The online baselines:

- **LRU**.
- **perfect LFU**: counts every request of an item since the trace began (evicted or not)
  and keeps the most requested items, least recent first among equals; a new item that
  would be the first to go is not admitted. Under static popularity this is the online limit.
- **W-TinyLFU**: the ``theine`` package (Caffeine's adaptive W-TinyLFU in Rust), driven
  with the trace's keys. It bounds entries, not bytes (it has no weigher), so its entry cap
  is the byte capacity divided by the mean size of a requested item (sizes weighted by
  requests: what a frequency-led cache ends up holding, not the catalogue's mean).
- **S3-FIFO** (Yang et al., SOSP 2023, Algorithm 1), in bytes: a small FIFO of 10% of the
  capacity, a main FIFO with a 2-bit clock, and a ghost FIFO of evicted keys bounded at 90%
  of the capacity in their sizes (as the authors' libCacheSim does).
- **GDSF** (GreedyDual-Size-Frequency, Cherkasova 1998): priority ``L + hits × cost / size``
  with the engine seconds as the cost; ``L`` rises to each victim's priority.

voxcache's policy is replayed from the product itself: the score is the function the disk
tier's index registers in SQLite (``voxcache.tiers.index.score``, from ``tiers.eviction``),
the clock and ghosts follow ``Index.evict``, and victims go in ``lifecycle.enforce``'s order
down to the same low watermark. ``voxcache (before)`` is the score this replaced
(recency in seconds plus an hour per doubling of hits), kept here for the before/after.

**Belady** (offline) evicts the item whose next request is furthest away, admission included
(an item never asked again is not kept). With variable sizes that is the standard
size-unaware approximation (libCacheSim's ``Belady``), not an upper bound: a size-aware online
policy can beat its hit ratio where sizes differ by orders of magnitude.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from voxcache.tiers.eviction import GHOSTS_PER_ENTRY, advance
from voxcache.tiers.index import score
from voxcache.tiers.lifecycle import BATCH, Limits

from .traces import Trace, next_use


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

    def seconds_saved(self, trace: Trace) -> float:
        """Engine seconds not spent: the cost of every request served from the cache."""
        return float(trace.seconds[trace.items][self.hits].sum())


def lru(trace: Trace, capacity: int) -> Outcome:
    """Least recently used."""
    items, sizes = trace.items.tolist(), trace.sizes.tolist()
    hits = np.zeros(len(items), dtype=bool)
    held: OrderedDict[int, int] = OrderedDict()
    used = 0
    for i, item in enumerate(items):
        if item in held:
            held.move_to_end(item)
            hits[i] = True
            continue
        size = sizes[item]
        if size > capacity:
            continue
        held[item] = size
        used += size
        while used > capacity:
            used -= held.popitem(last=False)[1]
    return Outcome(hits)


def perfect_lfu(trace: Trace, capacity: int) -> Outcome:
    """Most requested items since the trace began (counts survive eviction)."""
    items, sizes = trace.items.tolist(), trace.sizes.tolist()
    hits = np.zeros(len(items), dtype=bool)
    counts: dict[int, int] = {}
    live: dict[int, tuple[int, int, int]] = {}  # item -> its current heap entry
    heap: list[tuple[int, int, int]] = []
    used = 0
    for i, item in enumerate(items):
        count = counts[item] = counts.get(item, 0) + 1
        if item in live:
            hits[i] = True
        else:
            if sizes[item] > capacity:
                continue
            used += sizes[item]
        live[item] = entry = (count, i, item)
        heapq.heappush(heap, entry)
        while used > capacity:
            used -= sizes[_pop_valid(heap, live)]
    return Outcome(hits)


def gdsf(trace: Trace, capacity: int) -> Outcome:
    """GreedyDual-Size-Frequency: ``L + hits × seconds / bytes``, lowest first."""
    items, sizes, seconds = trace.items.tolist(), trace.sizes.tolist(), trace.seconds.tolist()
    hits = np.zeros(len(items), dtype=bool)
    freq: dict[int, int] = {}
    live: dict[int, tuple[float, int, int]] = {}
    heap: list[tuple[float, int, int]] = []
    inflation, used = 0.0, 0
    for i, item in enumerate(items):
        if item in live:
            freq[item] += 1
            hits[i] = True
        else:
            if sizes[item] > capacity:
                continue
            freq[item] = 1
            used += sizes[item]
        live[item] = entry = (inflation + freq[item] * seconds[item] / sizes[item], i, item)
        heapq.heappush(heap, entry)
        while used > capacity:
            priority = heap[0][0]
            victim = _pop_valid(heap, live)
            inflation = max(inflation, priority)
            del freq[victim]
            used -= sizes[victim]
    return Outcome(hits)


def s3fifo(trace: Trace, capacity: int, small_share: float = 0.1,
           ghost_share: float = 0.9) -> Outcome:
    """S3-FIFO, Algorithm 1 of the paper, with byte sizes."""
    cache = S3Fifo(capacity, trace.sizes.tolist(), small_share, ghost_share)
    return Outcome(np.fromiter((cache.read(item) for item in trace.items.tolist()), dtype=bool,
                               count=len(trace.items)))


class S3Fifo:
    """Small FIFO S (probation), main FIFO M (a 2-bit clock), ghost FIFO G (keys only).

    ``read(x)``: a hit in S or M bumps ``x.freq`` (capped at 3); a miss inserts ``x`` — into M
    if G remembers it, else into S — after evicting while the cache is full. Eviction takes
    from S while S holds at least ``small_share`` of the capacity: S's tail moves to M if it
    was read more than once since insertion (freq > 1), else it leaves and G remembers it.
    M's tail is reinserted at M's head with freq − 1 while its freq is above 0, else it leaves.
    """

    def __init__(self, capacity: int, sizes: list[int], small_share: float = 0.1,
                 ghost_share: float = 0.9) -> None:
        self.capacity, self.sizes = capacity, sizes
        self.small_capacity = int(capacity * small_share)
        self.ghost_capacity = int(capacity * ghost_share)
        self.small: OrderedDict[int, None] = OrderedDict()  # insertion order: first = tail
        self.main: OrderedDict[int, None] = OrderedDict()
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.freq: dict[int, int] = {}
        self.small_bytes = self.main_bytes = self.ghost_bytes = 0

    def read(self, item: int) -> bool:
        """Serve one request; True on a hit."""
        if item in self.freq:
            self.freq[item] = min(self.freq[item] + 1, 3)
            return True
        self.insert(item)
        return False

    def insert(self, item: int) -> None:
        size = self.sizes[item]
        to_main = item in self.ghost
        if to_main:
            self._forget_ghost(item)
        if size > (self.capacity if to_main else self.small_capacity):
            return  # larger than the queue it would enter (libCacheSim does the same)
        while self.small_bytes + self.main_bytes + size > self.capacity:
            self.evict()
        if to_main:
            self.main[item] = None
            self.main_bytes += size
        else:
            self.small[item] = None
            self.small_bytes += size
        self.freq[item] = 0

    def evict(self) -> None:
        if self.small and self.small_bytes >= self.small_capacity:
            self.evict_small()
        else:
            self.evict_main()

    def evict_small(self) -> None:
        while self.small:
            tail, _ = self.small.popitem(last=False)
            size = self.sizes[tail]
            self.small_bytes -= size
            if self.freq[tail] > 1:
                self.main[tail] = None
                self.main_bytes += size
                self.freq[tail] = 0
                if self.main_bytes > self.capacity - self.small_capacity:
                    self.evict_main()
            else:
                del self.freq[tail]
                self.ghost[tail] = None
                self.ghost_bytes += size
                while self.ghost_bytes > self.ghost_capacity:
                    self._forget_ghost(next(iter(self.ghost)))
                return

    def evict_main(self) -> None:
        while self.main:
            tail, _ = self.main.popitem(last=False)
            if self.freq[tail] > 0:
                self.main[tail] = None
                self.freq[tail] -= 1
            else:
                del self.freq[tail]
                self.main_bytes -= self.sizes[tail]
                return

    def _forget_ghost(self, item: int) -> None:
        del self.ghost[item]
        self.ghost_bytes -= self.sizes[item]


def w_tinylfu(trace: Trace, capacity: int) -> Outcome:
    """W-TinyLFU as the ``theine`` package runs it, with an entry cap for the byte capacity."""
    from theine import Cache as Theine

    items = trace.items.tolist()
    entries = max(1, int(capacity / trace.sizes[trace.items].mean()))
    random.seed(0)  # theine's read buffers pick a stripe at random
    cache = Theine(entries, nolock=True)
    hits = np.zeros(len(items), dtype=bool)
    try:
        for i, item in enumerate(items):
            if cache.get(item)[1]:
                hits[i] = True
            else:
                cache.set(item, True)
    finally:
        cache.close()
    return Outcome(hits)


UNRECORDED = frozenset({"encoded"})
"""Kinds whose stored envelope says nothing of what they cost (``voxcache.encoded`` records no
encode time): the product ranks them by ``eviction.DEFAULT_SECONDS_PER_MB``, and so does its
replay here; the baselines that use a cost (GDSF) get the trace's true one."""


def voxcache_policy(trace: Trace, capacity: int, limits: Limits | None = None) -> Outcome:
    """voxcache's disk tier, step for step: the score is ``tiers.eviction.score`` itself.

    A hit counts as one ask at the current clock (``Index.record_access``); a miss stores
    the take with its ghost's score plus this ask, or on probation (``Index.add_many``);
    a write that crosses the cap evicts lowest scores first (ties in insertion order, as
    SQLite's ``(pinned, score)`` index keeps them) down to the low watermark, each victim
    leaving a ghost, the clock advancing by the bytes freed, and ghosts beyond
    ``GHOSTS_PER_ENTRY`` per entry forgotten oldest first (``Index.evict``). It knows an
    entry's cost only where the product does (``UNRECORDED``).
    """
    limits = limits or Limits(max_bytes=capacity)
    target = int(capacity * limits.low_watermark)
    items, sizes = trace.items.tolist(), trace.sizes.tolist()
    kinds = [trace.kind_of(i) for i in range(len(sizes))] if len(trace.kinds) else None
    seconds = [0.0 if kinds and kinds[i] in UNRECORDED else s
               for i, s in enumerate(trace.seconds.tolist())]
    hits = np.zeros(len(items), dtype=bool)
    scores: dict[int, float] = {}
    live: dict[int, tuple[float, int, int]] = {}  # item -> its current heap entry
    row_of: dict[int, int] = {}  # item -> its row's insertion number (SQLite's rowid order)
    heap: list[tuple[float, int, int]] = []
    ghosts: OrderedDict[int, tuple[int, float]] = OrderedDict()  # item -> (seq, score)
    clock, used, rows, seq = 0.0, 0, 0, 0
    for i, item in enumerate(items):
        kind = kinds[item] if kinds else ""
        if item in live:
            hits[i] = True
            scores[item] = score(scores[item], 1, seconds[item], sizes[item], clock, kind)
        else:
            if sizes[item] > capacity:
                continue
            ghost = ghosts.pop(item, None)
            previous = None if ghost is None else ghost[1]
            scores[item] = score(previous, int(ghost is not None), seconds[item], sizes[item],
                                 clock, kind)
            used += sizes[item]
            rows += 1
            row_of[item] = rows
        live[item] = entry = (scores[item], row_of[item], item)
        heapq.heappush(heap, entry)
        if used <= capacity:
            continue
        while used > target:  # one batch of victims at a time, as lifecycle takes them
            freed = 0
            for _ in range(BATCH):
                victim = _pop_valid(heap, live)
                used -= sizes[victim]
                freed += sizes[victim]
                seq += 1
                ghosts[victim] = (seq, scores.pop(victim))
                if used <= target:
                    break
            clock = advance(clock, freed, capacity)
            while ghosts and next(iter(ghosts.values()))[0] <= seq - GHOSTS_PER_ENTRY * len(live):
                ghosts.popitem(last=False)
    return Outcome(hits)


def voxcache_before(trace: Trace, capacity: int) -> Outcome:
    """The disk tier's policy before this one (commit 63718d6): score ``last_access +
    3600 s × log2(1 + hits)``, encoded deliveries before anything else, evicting down to
    90% of the cap. Kept verbatim for the before/after; nothing in the product uses it."""
    target = int(capacity * 0.9)
    items, sizes, times = trace.items.tolist(), trace.sizes.tolist(), trace.times.tolist()
    encoded = [trace.kind_of(i) == "encoded" for i in range(len(sizes))]
    hits = np.zeros(len(items), dtype=bool)
    counts: dict[int, int] = {}
    live: dict[int, tuple[float, int, int]] = {}
    heaps: tuple[list, list] = ([], [])  # encoded first, then the rest
    used = 0
    for i, item in enumerate(items):
        if item in live:
            counts[item] += 1
            hits[i] = True
        else:
            if sizes[item] > capacity:
                continue
            counts[item] = 0
            used += sizes[item]
        live[item] = entry = (1.7e9 + times[i] + 3600.0 * math.log2(1 + counts[item]), i, item)
        heapq.heappush(heaps[0 if encoded[item] else 1], entry)
        if used > capacity:
            while used > target:
                while heaps[0] and live.get(heaps[0][0][-1]) is not heaps[0][0]:
                    heapq.heappop(heaps[0])  # superseded entries
                victim = _pop_valid(heaps[0] if heaps[0] else heaps[1], live)
                del counts[victim]
                used -= sizes[victim]
    return Outcome(hits)


def belady(trace: Trace, capacity: int) -> Outcome:
    """Evict the item asked for furthest in the future (offline optimum for equal sizes)."""
    items, sizes = trace.items.tolist(), trace.sizes.tolist()
    upcoming = next_use(trace.items).tolist()
    hits = np.zeros(len(items), dtype=bool)
    state: dict[int, int] = {}  # item -> next request index
    heap: list[tuple[int, int]] = []  # (-next use, item)
    used = 0
    for i, item in enumerate(items):
        if item in state:
            hits[i] = True
        else:
            if sizes[item] > capacity:
                continue
            used += sizes[item]
        state[item] = upcoming[i]
        heapq.heappush(heap, (-upcoming[i], item))
        while used > capacity:
            negative, victim = heapq.heappop(heap)
            if state.get(victim) == -negative:
                del state[victim]
                used -= sizes[victim]
    return Outcome(hits)


def _pop_valid(heap: list, live: dict) -> int:
    """Pop stale entries (superseded by a later push) until a live one; drop and return it."""
    while True:
        entry = heapq.heappop(heap)
        item = entry[-1]
        if live.get(item) is entry:
            del live[item]
            return item


Policy = Callable[[Trace, int], Outcome]
BASELINES: dict[str, Policy] = {
    "LRU": lru, "perfect LFU": perfect_lfu, "W-TinyLFU (theine)": w_tinylfu,
    "S3-FIFO": s3fifo, "GDSF (engine s)": gdsf}
"""The online policies voxcache is measured against."""
