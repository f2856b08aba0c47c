"""Writes to a slow shared tier (Redis, S3) behind a bounded queue that sheds when full.

A request must never wait for S3 or Redis to be answered: a take is served once the
local tiers hold it. ``WriteBehind`` wraps a shared tier inside the ``TierStack``:
reads and deletes go straight through, ``put`` only queues the entry and returns at
once, and a few worker threads write queued entries to the tier. The stack's rules
stay in one place: every queued write runs through the stack's own ``call``
(``run_through``), so the tier's breaker sees each failure, and while the breaker is
open the queue drains at once (skipped, counted) instead of each write waiting out a
timeout.

The queue is bounded by bytes and by entries. A write that would cross either bound
is **shed** (counted as ``<tier>_writes_shed``): the take is still served and stored
locally, other nodes just render or fetch it elsewhere. Dropping the newest write
keeps the queue's memory bounded whatever the tier does, and an entry is immutable,
so any node may share it later.

Two rules keep deletes honest: a delete drops the key's queued writes and waits for
the key's write in progress (if any) before it deletes from the tier, so a purged
take cannot be written back behind the purge. And ``wait_for(key)`` lets the render
lease's holder release the lease only once its take has landed in the tier (see
``tiers.leases``), so the nodes it wakes find it there.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..entry import Entry
from .base import Tier, TierHealth

log = logging.getLogger("voxcache.writebehind")

T = TypeVar("T")
DEFAULT_MAX_BYTES = 64 * 2**20
DEFAULT_MAX_ENTRIES = 4096
DEFAULT_WORKERS = 4
DRAIN_SECONDS = 5.0
"""How long ``close`` lets queued writes finish (a CLI run must share what it rendered)."""
SHED_RECENT_SECONDS = 10.0
"""A tier that shed a write this recently says ``degraded`` in its health."""

Runner = Callable[[Tier, str, Callable[[], T], T], T]
"""``TierStack.call``: run one operation on a tier under its breaker (fail-open)."""


@dataclass(slots=True)
class _Write:
    entry: Entry
    tenant: str
    pinned: bool
    pin_until: float | None


def _unguarded(tier: Tier, operation: str, fn: Callable[[], T], default: T) -> T:
    try:
        return fn()
    except Exception as exc:  # a worker must never die of one write
        log.warning("%s: %s failed: %s", tier.name, operation, exc)
        return default


class WriteBehind:
    """A shared tier whose writes are queued (bounded, shedding) and done in the background."""

    durable = True

    def __init__(self, inner: Tier, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_entries: int = DEFAULT_MAX_ENTRIES, workers: int = DEFAULT_WORKERS,
                 count: Callable[[str, int], None] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._count = count or (lambda name, delta: None)
        self._run: Runner[Any] = _unguarded
        self._queue: collections.deque[_Write] = collections.deque()
        self._queued_bytes = 0
        self._busy: dict[str, int] = {}
        """Writes queued or in progress, by key (what ``wait_for`` and ``delete`` wait on)."""
        self._cond = threading.Condition()
        self._closing = False
        self._last_shed = 0.0
        self._figures = collections.Counter[str]()
        self._threads = [threading.Thread(target=self._work, name=f"voxcache-{self.name}-writer",
                                          daemon=True) for _ in range(max(1, workers))]
        for thread in self._threads:
            thread.start()

    def run_through(self, runner: Runner[Any]) -> None:
        """Run every queued write through ``runner`` (the stack's ``call``, its breaker)."""
        self._run = runner

    # -- writes: queued ------------------------------------------------------------
    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> bool:
        """Queue ``entry`` for the tier; False (it is not held *yet*), and False when shed."""
        size = entry.size
        with self._cond:
            if self._closing:
                return False
            if (len(self._queue) >= self.max_entries
                    or (self._queue and self._queued_bytes + size > self.max_bytes)):
                self._last_shed = time.monotonic()
                self._figures["shed"] += 1
                shed = True
            else:
                self._queue.append(_Write(entry, tenant, pinned, pin_until))
                self._queued_bytes += size
                key = entry.header.key
                self._busy[key] = self._busy.get(key, 0) + 1
                self._figures["queued"] += 1
                self._cond.notify()
                shed = False
        if shed:
            self._count(f"{self.name}_writes_shed", 1)
        return False

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                job = self._queue.popleft()
                self._queued_bytes -= job.entry.size
            try:
                held = self._run(self, "write", lambda job=job: self.inner.put(
                    job.entry, tenant=job.tenant, pinned=job.pinned,
                    pin_until=job.pin_until), False)
            except BaseException:  # pragma: no cover - the runner catches what fn raises
                held = False
            with self._cond:
                self._figures["written" if held else "not_written"] += 1
                self._settled(job.entry.header.key)

    def _settled(self, key: str) -> None:
        left = self._busy.get(key, 0) - 1
        if left > 0:
            self._busy[key] = left
        else:
            self._busy.pop(key, None)
        self._cond.notify_all()

    def wait_for(self, key: str, timeout: float) -> bool:
        """Wait until no write of ``key`` is queued or running; False if ``timeout`` ran out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while key in self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def discard(self, key: str) -> None:
        """Drop the queued writes of ``key`` and wait for its write in progress: a delete
        made anywhere must not be undone by a write that was already waiting here."""
        with self._cond:
            kept: collections.deque[_Write] = collections.deque()
            for job in self._queue:
                if job.entry.header.key == key:
                    self._queued_bytes -= job.entry.size
                    self._settled(key)
                else:
                    kept.append(job)
            self._queue = kept
        self.wait_for(key, DRAIN_SECONDS)

    # -- everything else: straight through -------------------------------------------------
    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """The tier's read (the stack's breaker is around this call already)."""
        return self.inner.get(key, kind)

    def delete(self, key: str, kind: str | None = "audio") -> bool:
        """Drop queued writes of ``key``, then delete it from the tier."""
        self.discard(key)
        return self.inner.delete(key, kind)

    def contains(self, key: str, kind: str = "audio") -> bool:
        return self.inner.contains(key, kind)

    def health(self) -> TierHealth:
        """The tier's health; ``degraded`` while its write queue has shed recently."""
        health = self.inner.health()
        if health.state == "ok" and time.monotonic() - self._last_shed < SHED_RECENT_SECONDS:
            return TierHealth("degraded", "its write queue is full: takes are served, not all "
                              "are shared")
        return health

    def stats(self) -> dict[str, Any]:
        """The tier's own figures plus the queue's."""
        with self._cond:
            queue = {"entries": len(self._queue), "bytes": self._queued_bytes,
                     "max_entries": self.max_entries, "max_bytes": self.max_bytes,
                     **dict(self._figures)}
        return {**self.inner.stats(), "write_queue": queue}

    def close(self) -> None:
        """Let queued writes finish (at most ``DRAIN_SECONDS``), then close the tier."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            dropped = len(self._queue)
            self._queue.clear()
            self._queued_bytes = 0
        if dropped:
            log.warning("%s: %d queued writes dropped at close", self.name, dropped)
            self._count(f"{self.name}_writes_shed", dropped)
        self.inner.close()
