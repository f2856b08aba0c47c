"""In-process tier: verified entries held in memory, bounded in bytes per kind.

Entries enter only verified (read from disk) or built here, and ``bytes`` cannot change, so
a memory hit needs no second checksum. Each kind has its own byte budget (encodings cannot
push out PCM); pinned entries go last; derived entries go with their parent. Deletes made
elsewhere arrive through ``tiers.invalidation``; ``TierStack`` never promotes a read that
raced a delete.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ..entry import Entry
from .base import OK, TierHealth

DEFAULT_KIND_BUDGET = 64 * 1024 * 1024
# -- eviction priority per kind (stage caches) ---------------------------------------------
EVICTION_PRIORITY = {"session": 0, "encoded": 1}
"""When the tier as a whole is over ``total_budget``, kinds give way lowest first: decoder
state is the cheapest to rebuild (one prefill) and the least likely to be asked again, so it
goes before anything an engine took seconds to make ("free KV before embeddings"); delivery
encodings are re-derivable from their PCM. Kinds not named here rank ``DEFAULT_PRIORITY``."""
DEFAULT_PRIORITY = 2
# -- end of eviction priority --------------------------------------------------------------


class MemoryTier:
    """Byte-bounded LRU per artifact kind; expired entries read as misses."""

    name = "memory"
    durable = False

    def __init__(
        self,
        budgets: Mapping[str, int] | None = None,
        default_budget: int = DEFAULT_KIND_BUDGET,
        clock: Callable[[], float] = time.time,
        pinned: Callable[[str], bool] | None = None,
        total_budget: int | None = None,
        priorities: Mapping[str, int] | None = None,
    ) -> None:
        self._total_budget = total_budget
        """Bytes across every kind (None: only the per-kind budgets bound the tier)."""
        self._priorities = {**EVICTION_PRIORITY, **(priorities or {})}
        self._is_pinned = pinned
        """Where pins live (the disk tier's markers): asked once per entry put here."""
        self._budgets = dict(budgets or {})
        self._default_budget = default_budget
        self._clock = clock
        self._items: dict[str, OrderedDict[str, Entry]] = {}
        self._bytes: dict[str, int] = {}
        self._pinned: set[str] = set()
        self._children: dict[str, set[tuple[str, str]]] = {}
        self._lock = threading.Lock()
        self.evictions = 0

    def budget(self, kind: str) -> int:
        """Return the byte budget for one artifact kind."""
        return self._budgets.get(kind, self._default_budget)

    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """Return the live entry for ``key`` or None."""
        with self._lock:
            items = self._items.get(kind)
            entry = items.get(key) if items is not None else None
            if entry is None:
                return None
            expires = entry.header.expires
            if expires is not None and self._clock() >= expires:
                self._remove(kind, key)
                return None
            items.move_to_end(key)  # type: ignore[union-attr]  # found above
            return entry

    def peek(self, key: str, kind: str = "audio") -> Entry | None:
        """The live entry for ``key`` without touching its recency (a probe that must not
        count for the entry's owner uses this, then ``touch`` once ownership is known)."""
        items = self._items.get(kind)
        entry = items.get(key) if items is not None else None
        if entry is None or entry.header.expired(self._clock()):
            return None
        return entry

    def touch(self, key: str, kind: str = "audio") -> None:
        """Mark ``key`` as just used."""
        with self._lock:
            items = self._items.get(kind)
            if items is not None and key in items:
                items.move_to_end(key)

    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> Entry | None:
        """Hold ``entry`` unless a live take of its key is held already (first writer
        wins); the take held afterwards, or None when it is larger than the kind's budget."""
        return self._hold(entry, pinned, keep_live=True)

    def replace(self, entry: Entry, *, tenant: str = "") -> bool:
        """Hold ``entry`` whatever was held under its key (adopting the published take)."""
        return self._hold(entry, False, keep_live=False) is not None

    def _hold(self, entry: Entry, pinned: bool, keep_live: bool) -> Entry | None:
        kind, key, size = entry.header.kind, entry.header.key, entry.size
        budget = self.budget(kind)
        if size > budget:
            return None
        pinned = pinned or (self._is_pinned is not None and self._is_pinned(key))
        with self._lock:
            items = self._items.setdefault(kind, OrderedDict())
            held = items.get(key)
            if held is not None:
                if keep_live and not held.header.expired(self._clock()):
                    items.move_to_end(key)
                    return held
                self._remove(kind, key)
            items[key] = entry
            self._bytes[kind] = self._bytes.get(kind, 0) + size
            if pinned:
                self._pinned.add(key)
            parent = entry.header.meta.get("parent")
            if isinstance(parent, str) and parent:
                self._children.setdefault(parent, set()).add((kind, key))
            while self._bytes[kind] > budget:
                self._remove(kind, _victim(items, self._pinned))
                self.evictions += 1
            self._relieve_pressure()
        return entry

    def limit_total(self, total_budget: int | None) -> None:
        """Bound the bytes held across every kind; over it, the lowest-priority kind gives
        way first (``EVICTION_PRIORITY``)."""
        with self._lock:
            self._total_budget = total_budget
            self._relieve_pressure()

    def _relieve_pressure(self) -> None:
        """Evict, lowest-priority kind first (its least recent entry), until the whole tier
        is within ``total_budget`` (caller holds the lock)."""
        if self._total_budget is None:
            return
        while sum(self._bytes.values()) > self._total_budget:
            held = [kind for kind, items in self._items.items() if items]
            if not held:
                return
            kind = min(held, key=lambda k: (self._priorities.get(k, DEFAULT_PRIORITY),
                                            -self._bytes[k]))
            self._remove(kind, _victim(self._items[kind], self._pinned))
            self.evictions += 1

    def set_pinned(self, key: str, pinned: bool) -> None:
        """Keep ``key`` through memory pressure (or stop doing so)."""
        with self._lock:
            if pinned:
                self._pinned.add(key)
            else:
                self._pinned.discard(key)

    def delete(self, key: str, kind: str | None = None) -> bool:
        """Drop ``key`` and the entries derived from it (from one kind, or from all);
        True if anything was held."""
        with self._lock:
            self._pinned.discard(key)
            targets = [(k, key) for k in ([kind] if kind else list(self._items))]
            targets += sorted(self._children.pop(key, ()))
            found = False
            for k, target in targets:
                if target in self._items.get(k, {}):
                    self._remove(k, target)
                    found = True
            return found

    def clear(self) -> None:
        """Drop everything."""
        with self._lock:
            self._items.clear()
            self._bytes.clear()
            self._children.clear()

    def contains(self, key: str, kind: str = "audio") -> bool:
        """Whether ``key`` is held (expired or not)."""
        return key in self._items.get(kind, {})

    def health(self) -> TierHealth:
        """Memory does not fail."""
        return OK

    def close(self) -> None:
        """Nothing to flush."""

    def stats(self) -> dict[str, Any]:
        """Entries and bytes per kind."""
        with self._lock:
            return {
                kind: {"entries": len(items), "bytes": self._bytes.get(kind, 0),
                       "budget": self.budget(kind)}
                for kind, items in self._items.items()
            }

    def _remove(self, kind: str, key: str) -> None:
        entry = self._items[kind].pop(key)
        self._bytes[kind] -= entry.size
        parent = entry.header.meta.get("parent")
        if isinstance(parent, str) and parent in self._children:
            self._children[parent].discard((kind, key))
            if not self._children[parent]:
                del self._children[parent]


def _victim(items: OrderedDict[str, Entry], pinned: set[str]) -> str:
    """The least recently used unpinned key (pinned ones met on the way are kept and
    moved to the back); the least recent of all when every entry is pinned."""
    for _ in range(len(items)):
        key = next(iter(items))
        if key not in pinned:
            return key
        items.move_to_end(key)
    return next(iter(items))
