"""One cache folder: its tier stack, lifecycle, counters and cross-process news.

Built from the tier list alone (``tiers.registry``; tiers found by role, ``tiers.roles``);
reads and writes go through ``tiers.base.TierStack``. This module adds what belongs to the
folder as a whole: caps enforced right after a write that crosses them, counters, pins,
tenant-checked lookups, and news for the other processes (``tiers.invalidation``) and,
with shared tiers, other nodes (``tiers.nodes``, ``tiers.bus``, leases). A folder on a
network filesystem is refused: SQLite and ``flock`` are not safe there.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .entry import Entry
from .errors import InvalidParameter
from .tiers import purged
from .tiers.base import Tier, TierStack
from .tiers.bus import News
from .tiers.factory import close_all, tiers_from_urls
from .tiers.index import Index
from .tiers.invalidation import InvalidationLog
from .tiers.leases import Leases
from .tiers.lifecycle import Limits, enforce
from .tiers.nodes import LOCAL_TIERS, Nodes, shared_tiers, tier_list
from .tiers.publish import DEFAULT_MAX_BYTES
from .tiers.registry import DEFAULT_KIND_BUDGET
from .tiers.remote import redacted
from .tiers.roles import FolderTier, ProcessTier, TierRole, with_role
from .vocabulary import TierName

log = logging.getLogger("voxcache.cache")

@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Limits of one cache; ``None`` means unbounded."""

    memory_budgets: Mapping[str, int] = field(default_factory=dict)
    memory_default_budget: int = DEFAULT_KIND_BUDGET
    disk_max_bytes: int | None = None
    disk_max_entries: int | None = None
    default_ttl: float | None = None
    tiers: tuple[str, ...] = LOCAL_TIERS
    """Tiers in read order: ``memory``, ``disk``, then shared ones (``redis://…``, ``s3://…``)."""
    shared_write_queue: int = DEFAULT_MAX_BYTES
    """Bytes of takes each shared tier's write-behind queue may hold; past it writes are shed."""

    def tier_options(self, root: Path, clock: Callable[[], float]) -> dict[str, dict[str, Any]]:
        """Each configured tier's own settings, by tier name (``tiers_from_urls``)."""
        return {TierName.MEMORY: {"budgets": self.memory_budgets, "clock": clock,
                                  "default_budget": self.memory_default_budget},
                TierName.DISK: {"root": root, "clock": clock}}

    def describe(self) -> dict[str, Any]:
        """Effective limits, as printed at start."""
        return {
            "tiers": [redacted(tier) for tier in self.tiers],
            "shared_write_queue": self.shared_write_queue,
            "memory_budget_per_kind": self.memory_default_budget,
            "memory_budgets": dict(self.memory_budgets),
            "disk_max_bytes": self.disk_max_bytes,
            "disk_max_entries": self.disk_max_entries,
            "default_ttl": self.default_ttl,
        }


def _tenant_of(entry: Entry) -> str:
    return str(entry.header.meta.get("tenant", "default"))


class Cache:
    """The configured tiers over one cache folder, in read order."""

    def __init__(self, root: str | Path, config: CacheConfig | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.locks = self.root / "locks"
        """Where the per-key render locks live (``singleflight.key_lock``)."""
        self.config = config or CacheConfig()
        built = tiers_from_urls(tier_list(self.config.tiers),
                                options=self.config.tier_options(self.root, clock))
        try:
            self.folder: FolderTier = _one(built, TierRole.FOLDER)
            """The tier that is this cache folder (its index, pins, counters, faults)."""
            self.in_process: ProcessTier = _one(built, TierRole.PROCESS)
            """The tier private to this process (the fastest; what other processes' news
            clears)."""
        except BaseException:
            close_all(built)
            raise
        self._counts: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self._enforce_lock = threading.Lock()
        self._listeners: dict[str, list[Callable[[str], None]]] = {}
        publisher = shared_tiers(built, write_queue=self.config.shared_write_queue,
                                 count=self.count)
        self.tiers = TierStack(built, self.folder.faults, publisher=publisher,
                               on_adopt=self._announce_adoption)
        self.limits = Limits(self.config.disk_max_bytes, self.config.disk_max_entries)
        self.invalidations = InvalidationLog(self.root, self._apply_invalidation)
        self._publisher = publisher
        """Set before ``nodes``: the bus may apply news while ``Nodes`` is still starting."""
        self.nodes = Nodes(publisher, self.tiers, self.root, apply=self._apply_remote,
                           count=self.count, faults=self.folder.faults)
        self.leases: Leases | None = self.nodes.leases
        """The render leases across nodes (None without a Redis tier)."""

    @property
    def index(self) -> Index:
        """The cache folder's index: entries, counters, ledgers."""
        return self.folder.index

    def report_fault(self, area: str, exc: BaseException, message: str) -> None:
        """A fault worked around (``area``: what failed): counted, logged once per cause."""
        self.folder.faults.report(area, exc, message)

    def recall(self, key: str, kind: str = "audio") -> tuple[Entry, str] | None:
        """(entry, tier name) from the tier private to this process (no file read, no lock):
        the hot paths' first look."""
        entry = self.in_process.get(key, kind)
        return None if entry is None else (entry, self.in_process.name)

    def get(self, key: str, kind: str = "audio") -> tuple[Entry, str] | None:
        """Return (entry, tier name) from the fastest tier holding ``key``."""
        return self.tiers.get(key, kind)

    def read_disk(self, key: str, kind: str = "audio") -> Entry | None:
        """A read below the memory tier, promoted into memory (unless a delete landed
        while it read)."""
        found = self.read_below(key, kind)
        return None if found is None else found[0]

    def read_below(self, key: str, kind: str = "audio") -> tuple[Entry, str] | None:
        """(entry, tier) from the tiers below memory (disk, then the shared ones), promoted
        upwards: the tier says where it was found (``X-Cache-Tier``)."""
        return self.tiers.get(key, kind, start=1)

    def get_owned(self, key: str, tenant: str, kind: str = "audio", *,
                  check_index: bool = True) -> tuple[Entry, str] | None:
        """(entry, tier) when ``key`` is stored *and* belongs to ``tenant``; else None.

        Built so that a probe of another tenant's key cannot be told from a probe of an
        absent one: both cost one memory peek and one index lookup, neither reads the
        file, touches recency or counts a hit. Only the owner's request goes further.
        ``check_index=False`` (one tenant only, nothing to wall off) reads the file
        directly and checks its envelope.
        """
        held = self.in_process.peek(key, kind)
        if held is not None and _tenant_of(held) == tenant:
            self.in_process.touch(key, kind)
            return held, self.in_process.name
        if check_index and self.folder.owner(key) != tenant:
            return None  # absent and someone else's end here, after the same two steps
        if held is not None:
            return None  # held for another tenant (an index that disagrees changes nothing)
        found = self.read_below(key, kind)
        if found is None or _tenant_of(found[0]) != tenant:
            return None
        return found

    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None, wait: float = 0.0) -> Entry | None:
        """Publish a take through every tier (``TierStack.put``; ``wait``: how long to wait
        for the shared tiers' answer). The key's take held now — ``entry``, or the one
        another writer published first — or None if no durable tier could store it."""
        held = self.tiers.put(entry, tenant=tenant, pinned=pinned, pin_until=pin_until,
                              wait=wait)
        if held is not None:
            self._enforce_if_over()
        return held

    def pin(self, key: str, pinned: bool = True, until: float | None = None) -> bool:
        """Pin an entry so it is never evicted (until ``until``, when given); every
        process's memory tier keeps it through pressure too."""
        found = self.folder.pin(key, pinned, until)
        if found:
            self.in_process.set_pinned(key, pinned)
            self._publish([News("pin" if pinned else "unpin", key, until=until)])
        return found

    def delete(self, key: str, kind: str = "audio", *, until: float | None = None) -> bool:
        """Remove an entry and the entries derived from it (its encoded deliveries) from
        every tier, here and — through the invalidation log — in every other process.

        A delete is a purge: it is remembered first (``tiers.purged``: no import brings a
        take of these keys created up to ``until`` back, and packs published from here
        carry the tombstones). ``until`` defaults to now."""
        targets = [(key, kind), *self.folder.children(key)]
        self._remember_purged(targets, time.time() if until is None else until)
        found = False
        for target, target_kind in targets:
            found = self.tiers.delete(target, target_kind) or found
        self.in_process.delete(key)  # and the children it holds (any kind)
        self._publish([News("delete", target, kind=target_kind)
                       for target, target_kind in targets])
        return found

    def _remember_purged(self, targets: list[tuple[str, str]], until: float) -> None:
        """Record purged keys before they go (their rows name the tenant and creation
        time). The delete goes ahead when the index cannot record them: counted, logged."""
        try:
            purged.record(self.folder.index, [(k, kind, until) for k, kind in targets],
                          covering=True)
        except sqlite3.Error as exc:
            self.report_fault("purge record", exc, "a purge could not be remembered; "
                                    "an older pack imported later could bring it back")

    def lock_fault(self, exc: OSError) -> None:
        """A per-key lock could not be taken (read-only folder, no inodes): counted, logged
        once per cause; the render goes ahead without it."""
        self.report_fault("lock", exc, "a per-key lock could not be taken; rendering "
                                "without it (another process may render the same key)")

    def _publish(self, news: list[News]) -> None:
        """To the other processes on this machine (the log) and on other nodes (the bus)."""
        try:
            self.invalidations.publish([(item.event, item.subject) for item in news])
        except OSError as exc:
            self.report_fault("invalidation", exc, "a delete or pin could not be "
                                    "published; other processes may serve the old state from "
                                    "memory until they restart")
        self.nodes.publish(news)

    def _announce_adoption(self, entry: Entry) -> None:
        """This folder now holds another take of the key: the other processes here drop
        what their memory holds of it."""
        try:
            self.invalidations.publish([("adopt", entry.header.key)])
        except OSError as exc:
            self.report_fault("invalidation", exc, "an adopted take could not be "
                                    "announced; other processes may serve the old one from "
                                    "memory until they restart")

    def on_event(self, event: str, listener: Callable[[str], None]) -> None:
        """Call ``listener(subject)`` when another process announces ``event`` (e.g.
        ``revision``: a gateway switched the upstream's weights; see ``announce``)."""
        self._listeners.setdefault(event, []).append(listener)

    def announce(self, event: str, subject: str) -> None:
        """Tell the other processes sharing this folder (and the other nodes) that
        ``subject`` changed."""
        self._publish([News(event, subject)])

    def _apply_invalidation(self, event: str, key: str) -> None:
        """Another process changed ``key``: bring this process's memory tier in line."""
        if event in ("delete", "adopt"):
            self.tiers.forget(key)
        elif event in ("pin", "unpin"):
            self.in_process.set_pinned(key, event == "pin")
        elif event == "clear":
            self.in_process.clear()
        for listener in self._listeners.get(event, ()):
            listener(key)

    def _apply_remote(self, news: News) -> None:
        """Another node changed something: bring this process's memory *and* disk tiers in
        line (never the shared tiers: the other node did that), publishing nothing again."""
        key = news.subject
        if news.event == "delete":
            targets = [(key, news.kind or "audio"), *self.folder.children(key)]
            self._remember_purged(targets, time.time())
            for target, kind in targets:
                if self._publisher is not None:  # a queued write must not bring it back
                    self._publisher.discard(target)
                self.tiers.forget(target)
                self.tiers.call(self.folder, "delete", partial(
                                self.folder.delete, target, kind), False)
            self.in_process.delete(key)
        elif news.event in ("pin", "unpin"):
            pinned = news.event == "pin"
            self.tiers.call(self.folder, "pin", lambda: self.folder.pin(key, pinned, news.until),
                            False)
            self.in_process.set_pinned(key, pinned)
        elif news.event == "clear":
            self.in_process.clear()
        for listener in self._listeners.get(news.event, ()):
            listener(key)

    def settle(self, key: str, timeout: float) -> bool:
        """Wait until the shared tiers hold what this process queued for ``key``."""
        return self.nodes.settle(key, timeout)

    def count(self, name: str, delta: int = 1) -> None:
        """Count an event in this process and in the persisted counters."""
        with self._count_lock:
            self._counts[name] = self._counts.get(name, 0) + delta
        self.folder.count(name, delta)

    def session_counts(self) -> dict[str, int]:
        """Counters of this process since start."""
        with self._count_lock:
            return dict(self._counts)

    def stats(self, wait: float | None = None) -> dict[str, Any]:
        """Entries and bytes per tier plus the persisted counters; ``wait`` bounds how long
        the flush before waits for another process's lock on the index."""
        self.folder.flush(wait)
        counters = self.folder.counters()
        disk: dict[str, Any] = {"entries": None, "bytes": None,
                                "max_bytes": self.limits.max_bytes,
                                "max_entries": self.limits.max_entries}
        if counters is None:  # the index cannot answer now (locked, being rebuilt)
            disk["index"] = "unavailable"
            counters = {}
        else:
            disk["bytes"] = counters.pop("disk_bytes", 0)
            disk["entries"] = counters.pop("disk_entries", 0)
        return {
            "root": str(self.root),
            "tiers": {self.in_process.name: self.in_process.stats(), self.folder.name: disk,
                      **self.nodes.stats()},
            **({"nodes": nodes} if (nodes := self.nodes.health()) else {}),
            "counters": counters,
        }

    def gc(self) -> dict[str, int]:
        """Enforce TTL and caps now (offline maintenance)."""
        self.folder.flush()
        self.invalidations.rotate()
        return enforce(self.root, self.folder.index, self.limits)

    def _enforce_if_over(self) -> None:
        """After a write that crossed a cap, evict down to the low watermark (one writer
        at a time; the others go on), failing open if the index cannot answer."""
        limits = self.limits
        if limits.max_bytes is None and limits.max_entries is None:
            return
        totals = self.folder.totals()
        if totals is None:
            return
        total_bytes, total_entries = totals
        over = (limits.max_bytes is not None and total_bytes > limits.max_bytes) or (
            limits.max_entries is not None and total_entries > limits.max_entries)
        if over and self._enforce_lock.acquire(blocking=False):
            self._enforce()

    def _enforce(self) -> None:
        try:
            self.folder.flush()  # recency first, so the victims are the right ones
            enforce(self.root, self.folder.index, self.limits)
        except sqlite3.Error as exc:
            self.report_fault("eviction", exc, "eviction could not run; the disk tier "
                                    "may stay over its cap until the index recovers")
        finally:
            self._enforce_lock.release()

    def close(self) -> None:
        """Flush counters and recency, stop background threads (the leases and the bus
        first: a lease's release waits for its take's queued writes)."""
        self.nodes.close()
        self.nodes.fold()
        self.invalidations.close()
        self.tiers.close()


def _one(tiers: list[Tier], role: TierRole) -> Any:
    """The one tier of ``tiers`` in ``role`` (``tier_list`` made sure there is one)."""
    found = with_role(tiers, role)
    if len(found) != 1:
        raise InvalidParameter(f"the tier list needs exactly one {role} tier; it has "
                               f"{[tier.name for tier in found]}")
    return found[0]
