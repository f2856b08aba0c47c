"""In-process tier: verified entries held in memory, bounded in bytes per kind.

Entries enter this tier only after they were verified (read from disk) or
built by us (fresh renders), and Python ``bytes`` cannot change afterwards, so
a memory hit needs no second checksum pass — that is what keeps it in the
microseconds. Each artifact kind has its own byte budget so that, say, a burst
of large encoded variants cannot push out the canonical PCM.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from ..entry import Entry

DEFAULT_KIND_BUDGET = 64 * 1024 * 1024


class MemoryTier:
    """Byte-bounded LRU per artifact kind; expired entries read as misses."""

    name = "memory"

    def __init__(
        self,
        budgets: Mapping[str, int] | None = None,
        default_budget: int = DEFAULT_KIND_BUDGET,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._budgets = dict(budgets or {})
        self._default_budget = default_budget
        self._clock = clock
        self._items: dict[str, OrderedDict[str, Entry]] = {}
        self._bytes: dict[str, int] = {}
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
            items.move_to_end(key)  # type: ignore[union-attr]
            return entry

    def put(self, entry: Entry) -> bool:
        """Store an entry; False when it is larger than the kind's whole budget."""
        kind, key, size = entry.header.kind, entry.header.key, entry.size
        budget = self.budget(kind)
        if size > budget:
            return False
        with self._lock:
            items = self._items.setdefault(kind, OrderedDict())
            if key in items:
                self._remove(kind, key)
            items[key] = entry
            self._bytes[kind] = self._bytes.get(kind, 0) + size
            while self._bytes[kind] > budget:
                oldest = next(iter(items))
                self._remove(kind, oldest)
                self.evictions += 1
        return True

    def delete(self, key: str, kind: str | None = None) -> bool:
        """Drop ``key`` (from one kind, or from all); True if it was held."""
        with self._lock:
            kinds = [kind] if kind else list(self._items)
            found = False
            for k in kinds:
                if key in self._items.get(k, {}):
                    self._remove(k, key)
                    found = True
            return found

    def clear(self) -> None:
        """Drop everything."""
        with self._lock:
            self._items.clear()
            self._bytes.clear()

    def stats(self) -> dict[str, dict[str, int]]:
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
