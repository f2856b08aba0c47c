"""The tiers put together: read order, promotion, write-through, counters.

Reads go memory → disk; a disk hit is promoted into memory. Writes go to every
tier (disk first, since it is the one that survives). A tier that fails is a
miss for that request, never an error for the caller. Caps are enforced right
after a write that crosses them, so the disk tier never drifts far over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .entry import Entry
from .tiers.disk import DiskTier
from .tiers.lifecycle import Limits, enforce
from .tiers.memory import DEFAULT_KIND_BUDGET, MemoryTier

log = logging.getLogger("voxcache.cache")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Limits of one cache; ``None`` means unbounded."""

    memory_budgets: Mapping[str, int] = field(default_factory=dict)
    memory_default_budget: int = DEFAULT_KIND_BUDGET
    disk_max_bytes: int | None = None
    disk_max_entries: int | None = None
    default_ttl: float | None = None

    def describe(self) -> dict[str, Any]:
        """Effective limits, as printed at start."""
        return {
            "memory_budget_per_kind": self.memory_default_budget,
            "memory_budgets": dict(self.memory_budgets),
            "disk_max_bytes": self.disk_max_bytes,
            "disk_max_entries": self.disk_max_entries,
            "default_ttl": self.default_ttl,
        }


class Cache:
    """Memory and disk tiers over one cache folder."""

    def __init__(self, root: str | Path, config: CacheConfig | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.config = config or CacheConfig()
        self.memory = MemoryTier(self.config.memory_budgets, self.config.memory_default_budget,
                                 clock=clock)
        self.disk = DiskTier(self.root, clock=clock)
        self.limits = Limits(self.config.disk_max_bytes, self.config.disk_max_entries)
        self._counts: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self._enforce_lock = threading.Lock()

    def get(self, key: str, kind: str = "audio") -> tuple[Entry, str] | None:
        """Return (entry, tier name) from the fastest tier holding ``key``."""
        entry = self.memory.get(key, kind)
        if entry is not None:
            return entry, "memory"
        entry = self.disk.get(key, kind)
        if entry is not None:
            self.memory.put(entry)
            return entry, "disk"
        return None

    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> bool:
        """Write through every tier; False if the disk tier could not store it."""
        stored = self.disk.put(entry, tenant=tenant, pinned=pinned, pin_until=pin_until)
        self.memory.put(entry)
        if stored:
            self._enforce_if_over()
        return stored

    def pin(self, key: str, pinned: bool = True, until: float | None = None) -> bool:
        """Pin an entry so it is never evicted (until ``until``, when given)."""
        return self.disk.pin(key, pinned, until)

    def delete(self, key: str, kind: str = "audio") -> bool:
        """Remove an entry from every tier."""
        in_memory = self.memory.delete(key)
        return self.disk.delete(key, kind) or in_memory

    def count(self, name: str, delta: int = 1) -> None:
        """Count an event in this process and in the persisted counters."""
        with self._count_lock:
            self._counts[name] = self._counts.get(name, 0) + delta
        self.disk.count(name, delta)

    def session_counts(self) -> dict[str, int]:
        """Counters of this process since start."""
        with self._count_lock:
            return dict(self._counts)

    def stats(self) -> dict[str, Any]:
        """Entries and bytes per tier plus the persisted counters."""
        self.disk.flush()
        disk_bytes, disk_entries = self.disk.index.totals()
        counters = self.disk.index.counters()
        counters.pop("disk_bytes", None)
        counters.pop("disk_entries", None)
        return {
            "root": str(self.root),
            "tiers": {
                "memory": self.memory.stats(),
                "disk": {"entries": disk_entries, "bytes": disk_bytes,
                         "max_bytes": self.limits.max_bytes,
                         "max_entries": self.limits.max_entries},
            },
            "counters": counters,
        }

    def gc(self) -> dict[str, int]:
        """Enforce TTL and caps now (offline maintenance)."""
        self.disk.flush()
        return enforce(self.root, self.disk.index, self.limits)

    def _enforce_if_over(self) -> None:
        limits = self.limits
        if limits.max_bytes is None and limits.max_entries is None:
            return
        total_bytes, total_entries = self.disk.index.totals()
        over = (limits.max_bytes is not None and total_bytes > limits.max_bytes) or (
            limits.max_entries is not None and total_entries > limits.max_entries)
        if over and self._enforce_lock.acquire(blocking=False):
            try:
                self.disk.flush()  # recency first, so the victims are the right ones
                enforce(self.root, self.disk.index, limits)
            finally:
                self._enforce_lock.release()

    def close(self) -> None:
        """Flush counters and recency, stop background threads."""
        self.disk.close()
