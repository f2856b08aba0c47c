"""Publication to the shared tiers: one bounded queue, the deepest tier first, losers adopt.

Every shared tier keeps the first writer's take; a publication writes the deepest first
(S3, then Redis), brings the others in line with its answer, and a node whose take lost
adopts the winner (``adopt``), so after publication every node serves one take. Requests
never wait unless asked (a leader may wait ``wait`` s); the queue is bounded (past it a write
is shed, counted); failed writes retry for ``RETRY_FOR`` s; a delete drops the key's queued
writes (``discard``). docs/operating/cluster.md, "Publication: one take per key".
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from ..entry import Entry
from ..vocabulary import TierCount

log = logging.getLogger("voxcache.publish")

T = TypeVar("T")
DEFAULT_MAX_BYTES = 64 * 2**20
DEFAULT_MAX_ENTRIES = 4096
DEFAULT_WORKERS = 4
DRAIN_SECONDS = 5.0
"""How long ``close`` lets queued writes finish (a CLI run must share what it rendered)."""
SHED_RECENT_SECONDS = 10.0
"""A tier that shed a write this recently says ``degraded`` in its health."""
RETRY_FIRST, RETRY_MAX, RETRY_FOR = 1.0, 30.0, 600.0
"""A failed shared write is tried again after 1 s, doubling up to 30 s, for 10 minutes."""
FAILED: Any = object()



class Tier(Protocol):
    """What publication needs of a shared tier (``tiers.base.Tier`` has it all)."""

    name: str

    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> Entry | None: ...

    def replace(self, entry: Entry, *, tenant: str = "") -> bool: ...


Runner = Callable[[Any, str, Callable[[], T], T], T]
"""``TierStack.call``: one operation on a tier under its breaker (fail-open)."""
Adopt = Callable[[Entry, Entry], None]
"""Called with (our take, the published take) when another writer's take won."""


def same_take(a: Entry, b: Entry) -> bool:
    """Whether two entries are one take (the same stored bytes)."""
    return a is b or a.blob == b.blob


@dataclass(slots=True)
class Lead:
    """A leader's publication (``Publisher.lead``): the take the shared tiers decided, once
    known, and whether the leader is still storing a take in this folder."""

    outcome: Entry | None = None
    storing: bool = True
    """Until ``Publisher.release``: an adoption now would be overwritten by the leader's own
    writes, so the leader adopts the outcome itself."""
    done: threading.Event = field(default_factory=threading.Event)
    """The first attempt is over (decided or not)."""


@dataclass(slots=True)
class _Job:
    entry: Entry
    tenant: str
    tiers: Sequence[Tier]
    """The shared tiers to write, deepest first."""
    decided: bool
    """``entry`` is the key's take already (promoted from a deeper tier): align only."""
    started: float = field(default_factory=time.monotonic)
    attempt: int = 0
    outcome: Entry | None = None
    lead: Lead | None = None
    """The leader of this write (``Publisher.lead``), kept across retries."""

    @property
    def key(self) -> str:
        return self.entry.header.key

    def over(self) -> None:
        """This attempt is over (decided, shed or dropped): a waiting leader goes on."""
        if self.lead is not None:
            self.lead.done.set()


class Publisher:
    """The shared tiers' writes: queued, bounded, deepest tier first, retried."""

    def __init__(self, tiers: Sequence[Tier], *, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_entries: int = DEFAULT_MAX_ENTRIES, workers: int = DEFAULT_WORKERS,
                 count: Callable[[str, int], None] | None = None) -> None:
        self.tiers = list(tiers)
        """The shared tiers in read order (the deepest last)."""
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._count = count or (lambda name, delta: None)
        self._run: Runner[Any] = _unguarded
        self._adopt: Adopt = lambda ours, winner: None
        self._ready: deque[_Job] = deque()
        self._later: list[tuple[float, int, _Job]] = []
        self._order = itertools.count()
        self._bytes = 0
        self._busy: dict[str, int] = {}
        """Writes queued, waiting to be retried or running, by key."""
        self._cond = threading.Condition()
        self._closing = False
        self._last_shed = 0.0
        self._figures: Counter[str] = Counter()
        self._threads = [threading.Thread(target=self._work, name="voxcache-publish",
                                          daemon=True) for _ in range(max(1, workers))]
        for thread in self._threads:
            thread.start()

    def bind(self, runner: Runner[Any], adopt: Adopt) -> None:
        """Run every write through ``runner`` (the stack's breakers); ``adopt`` is told
        when another writer's take won."""
        self._run = runner
        self._adopt = adopt

    # -- submitting --------------------------------------------------------------------
    def submit(self, entry: Entry, tenant: str = "", *, below: int | None = None) -> None:
        """Queue ``entry`` for the shared tiers (only those above index ``below`` of
        ``tiers``, for a take promoted from there: it is the key's take already); a losing
        take is adopted when the outcome comes."""
        tiers = self.tiers if below is None else self.tiers[:below]
        if tiers:
            self._queue(_Job(entry, tenant, tiers[::-1], decided=below is not None))

    def lead(self, entry: Entry, tenant: str, wait: float) -> Lead:
        """Queue a leader's fresh take and wait up to ``wait`` s for the take the shared
        tiers decide (``Lead.outcome``, None if not known by then). Nothing is adopted for
        it until ``release``: the leader is storing a take here meanwhile."""
        lead = Lead()
        if self.tiers and self._queue(_Job(entry, tenant, self.tiers[::-1], decided=False,
                                           lead=lead)):
            lead.done.wait(wait)
        return lead

    def release(self, lead: Lead, held: Entry) -> Entry | None:
        """The leader has stored ``held`` here: the take it must adopt instead, decided
        meanwhile (None: ``held`` it is, or not decided yet and the publisher adopts it)."""
        with self._cond:
            lead.storing = False
            outcome = lead.outcome
        if outcome is None or same_take(outcome, held):
            return None
        self._count("takes_adopted", 1)
        return outcome

    def _queue(self, job: _Job, at: float | None = None) -> bool:
        size = job.entry.size
        with self._cond:
            queued = len(self._ready) + len(self._later)
            if self._closing or queued >= self.max_entries or (
                    queued and self._bytes + size > self.max_bytes):
                shed = not self._closing
                if shed:
                    self._last_shed = time.monotonic()
                    self._figures["shed"] += 1
            else:
                shed = False
                self._bytes += size
                if job.attempt == 0:
                    self._busy[job.key] = self._busy.get(job.key, 0) + 1
                    self._figures["queued"] += 1
                if at is None:
                    self._ready.append(job)
                else:
                    heapq.heappush(self._later, (at, next(self._order), job))
                self._cond.notify()
                return True
        if job.attempt:
            self._settled(job.key)
        if shed:
            for tier in job.tiers:
                self._count(TierCount.WRITES_SHED.of(tier.name), 1)
        job.over()
        return False

    # -- the workers ---------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                if job is None:
                    return
                self._bytes -= job.entry.size
            try:
                failed = self._publish(job)
            except Exception:  # pragma: no cover - the runner catches what tiers raise
                log.exception("publication of %s failed", job.key[:16])
                failed = []
            if failed and not self._retry(job, failed):
                self._figures["not_written"] += 1
            if not failed:
                self._figures["written"] += 1
            with self._cond:
                if not failed:
                    self._settled(job.key)

    def _next(self) -> _Job | None:
        """The next job to run (caller holds the lock); None when closing and empty."""
        while True:
            now = time.monotonic()
            while self._later and (self._later[0][0] <= now or self._closing):
                self._ready.append(heapq.heappop(self._later)[2])
            if self._ready:
                return self._ready.popleft()
            if self._closing:
                return None
            self._cond.wait(None if not self._later else max(0.0, self._later[0][0] - now))

    def _publish(self, job: _Job) -> list[Tier]:
        """Write the job's tiers deepest first: the first that answers decides the take,
        the others are brought in line with it. The tiers that failed are returned."""
        winner = job.entry if job.decided else None
        failed: list[Tier] = []
        for tier in job.tiers:
            if winner is None:
                held = self._run(tier, "write", partial(tier.put, job.entry,
                                 tenant=job.tenant), FAILED)
                if held is FAILED:
                    failed.append(tier)
                elif held is not None:
                    winner = held
                continue
            held = self._run(tier, "write", partial(
                tier.put, winner, tenant=job.tenant), FAILED)
            if held is FAILED:
                failed.append(tier)
            elif held is not None and not same_take(held, winner):
                self._count(TierCount.REALIGNED.of(tier.name), 1)
                self._run(tier, "replace", partial(
                    tier.replace, winner, tenant=job.tenant), False)
        lead = job.lead
        with self._cond:
            job.outcome = winner
            if lead is not None and winner is not None:
                lead.outcome = winner
            storing = lead is not None and lead.storing  # the leader adopts it itself
        job.over()
        if winner is not None and not storing and not same_take(winner, job.entry):
            self._count("takes_adopted", 1)
            self._adopt(job.entry, winner)
        return failed

    def _retry(self, job: _Job, failed: list[Tier]) -> bool:
        """Queue the job again (every tier: the deepest still decides) after a back-off;
        False when its time is up or the queue is full."""
        delay = min(RETRY_MAX, RETRY_FIRST * 2 ** job.attempt)
        if time.monotonic() + delay - job.started > RETRY_FOR or self._closing:
            with self._cond:
                self._settled(job.key)
            for tier in failed:
                self._count(TierCount.WRITES_FAILED.of(tier.name), 1)
            return False
        again = _Job(job.outcome or job.entry, job.tenant, job.tiers if job.decided
                     else self.tiers[::-1], job.decided, job.started, job.attempt + 1,
                     lead=job.lead)
        self._figures["retried"] += 1
        return self._queue(again, at=time.monotonic() + delay)

    def _settled(self, key: str) -> None:
        """One write of ``key`` is over (caller holds the lock)."""
        left = self._busy.get(key, 0) - 1
        if left > 0:
            self._busy[key] = left
        else:
            self._busy.pop(key, None)
        self._cond.notify_all()

    # -- waiting and forgetting ----------------------------------------------------------
    def wait_for(self, key: str, timeout: float) -> bool:
        """Wait until no write of ``key`` is queued, waiting for a retry or running; False
        if ``timeout`` ran out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while key in self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def discard(self, key: str) -> None:
        """Drop the queued writes of ``key`` and wait for its running one: a delete made
        anywhere must not be undone by a write that was already waiting here."""
        with self._cond:
            kept = deque(job for job in self._ready if job.key != key)
            dropped = [job for job in self._ready if job.key == key]
            later = [item for item in self._later if item[2].key != key]
            dropped += [item[2] for item in self._later if item[2].key == key]
            self._ready, self._later = kept, later
            heapq.heapify(self._later)
            for job in dropped:
                self._bytes -= job.entry.size
                self._settled(key)
                job.over()
        self.wait_for(key, DRAIN_SECONDS)

    # -- figures ---------------------------------------------------------------------------
    def shed_recently(self) -> bool:
        """Whether a write was shed within ``SHED_RECENT_SECONDS``."""
        return time.monotonic() - self._last_shed < SHED_RECENT_SECONDS

    def stats(self) -> dict[str, Any]:
        """The queue: what it holds and what became of what went through it."""
        with self._cond:
            return {"entries": len(self._ready) + len(self._later), "bytes": self._bytes,
                    "retrying": len(self._later), "busy": len(self._busy),
                    "max_entries": self.max_entries, "max_bytes": self.max_bytes,
                    **dict(self._figures)}

    def close(self) -> None:
        """Let queued writes finish (at most ``DRAIN_SECONDS``; retries are tried once more
        now), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            dropped = len(self._ready) + len(self._later)
            self._ready.clear()
            self._later.clear()
            self._bytes = 0
        if dropped:
            log.warning("shared tiers: %d queued writes dropped at close", dropped)
            for tier in self.tiers:
                self._count(TierCount.WRITES_SHED.of(tier.name), dropped)


def _unguarded(tier: Tier, operation: str, fn: Callable[[], T], default: T) -> T:
    try:
        return fn()
    except Exception as exc:  # a worker must never die of one write
        log.warning("%s: %s failed: %s", tier.name, operation, exc)
        return default
