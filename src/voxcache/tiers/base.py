"""The tier protocol, and the stack that puts tiers in order and keeps them honest.

Every tier verifies what it reads back and answers a miss for anything it cannot vouch
for. ``TierStack`` applies the shared rules: read fastest first and promote (never over a
delete that raced the read); publish to every tier, first writer wins, the shared tiers'
answer deciding (``tiers.publish``); fail open (a tier that raises is a miss for that call,
counted; ``BREAKER_FAILURES`` in a row leave it alone for a doubling back-off, and the next
success puts it back). ``voxcache.testing.tier_contract`` is what every tier must pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..entry import Entry
from .faults import FaultLog
from .publish import Publisher, same_take

T = TypeVar("T")

BREAKER_FAILURES = 3
BREAKER_FIRST_SECONDS = 1.0
BREAKER_MAX_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class TierHealth:
    """How a tier is doing: ``ok``, ``degraded`` (working around a fault) or ``down``."""

    state: str
    detail: str = ""

    @property
    def usable(self) -> bool:
        """True unless the tier is down."""
        return self.state != "down"


OK = TierHealth("ok")


@runtime_checkable
class Tier(Protocol):
    """What the stack needs of a tier."""

    name: str
    durable: bool
    """True when an entry outlives the process (disk, Redis, S3); False for memory."""

    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """The verified, unexpired entry, or None."""

    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> Entry | None:
        """Store ``entry`` unless a live take of its key is held (first writer wins); the
        take held afterwards — ``entry`` or the earlier writer's — or None if not stored."""

    def replace(self, entry: Entry, *, tenant: str = "") -> bool:
        """Hold ``entry`` under its key whatever was held (a process adopting the take the
        shared tiers published); True if it is held afterwards."""

    def delete(self, key: str, kind: str | None = "audio") -> bool:
        """Remove an entry; True if it was there. ``None`` (private tiers only, see
        ``TierStack.forget``) means every kind."""

    def contains(self, key: str, kind: str = "audio") -> bool:
        """A cheap existence check (it may say True for an entry a read then refuses)."""

    def stats(self) -> dict[str, Any]:
        """Entries and bytes held (what a dashboard shows), as JSON-friendly values."""

    def health(self) -> TierHealth:
        """How the tier is doing right now."""

    def close(self) -> None:
        """Flush and release what the tier holds open."""


class _Breaker:
    """Consecutive failures of one tier, and when it may be tried again."""

    def __init__(self, max_seconds: float = BREAKER_MAX_SECONDS) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.backoff = min(BREAKER_FIRST_SECONDS, max_seconds)
        self.max_seconds = max_seconds
        self.last_error = ""

    def allows(self, now: float) -> bool:
        return now >= self.open_until

    def succeeded(self) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.backoff = min(BREAKER_FIRST_SECONDS, self.max_seconds)

    def failed(self, now: float, error: str) -> None:
        """Count a failure; open the breaker unless it is open already. Calls in flight
        when it opened fail after it: they neither extend the back-off nor double it."""
        self.failures += 1
        self.last_error = error
        if self.failures >= BREAKER_FAILURES and self.allows(now):
            self.open_until = now + self.backoff
            self.backoff = min(self.backoff * 2, self.max_seconds)


class TierStack:
    """Tiers in read order (fastest first), with promotion, publication and fail-open."""

    def __init__(self, tiers: Sequence[Tier], faults: FaultLog,
                 clock: Callable[[], float] = time.monotonic, *,
                 publisher: Publisher | None = None,
                 on_adopt: Callable[[Entry], None] | None = None) -> None:
        if not tiers:
            raise ValueError("a tier stack needs at least one tier")
        self.tiers = list(tiers)
        self.publisher = publisher
        """The shared tiers' publication (None: no shared tier)."""
        shared = set(map(id, publisher.tiers)) if publisher is not None else set()
        self._local = [tier for tier in self.tiers if id(tier) not in shared]
        self._local_durable = [tier for tier in self._local if tier.durable]
        self._private = [tier for tier in self._local if not tier.durable]
        self._durable = any(tier.durable for tier in self.tiers)
        self._faults = faults
        self._clock = clock
        self._breakers = {tier.name: _Breaker() for tier in self.tiers}
        self._lock = threading.Lock()
        self._on_adopt = on_adopt or (lambda entry: None)
        self.generation = 0
        """Deletes and adoptions seen so far: a lower-tier hit read before one is not
        promoted."""
        if publisher is not None:
            publisher.bind(self.call, self.adopt)

    def by_name(self, name: str) -> Tier | None:
        """The tier called ``name``, if the stack has one."""
        return next((tier for tier in self.tiers if tier.name == name), None)

    # -- reads ---------------------------------------------------------------------
    def get(self, key: str, kind: str = "audio", *, start: int = 0
            ) -> tuple[Entry, str] | None:
        """(entry, tier name) from the fastest tier holding ``key``, promoted upwards."""
        generation = self.generation
        for depth in range(start, len(self.tiers)):
            tier = self.tiers[depth]
            entry = self.call(tier, "get", partial(tier.get, key, kind), None)
            if entry is not None:
                if depth and generation == self.generation:
                    self.promote(entry, depth)
                return entry, tier.name
        return None

    def promote(self, entry: Entry, depth: int) -> None:
        """Copy an entry found at ``depth`` into every faster tier: the local ones now,
        the shared ones above it through the publisher (it is the key's take already)."""
        above = self.tiers[:depth]
        for tier in above:
            if tier in self._local:
                self.call(tier, "promote", partial(tier.put, entry), None)
        if self.publisher is not None and any(t not in self._local for t in above):
            found = self.tiers[depth]
            self.publisher.submit(entry, below=self.publisher.tiers.index(found))

    # -- writes ----------------------------------------------------------------------
    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None, wait: float = 0.0) -> Entry | None:
        """Publish a take: the shared tiers (waiting up to ``wait`` seconds for their
        answer), then this folder, then memory. Returns the take of the key held now —
        ``entry``, or the one published first — once a durable tier holds it, else None.

        With the shared tiers' answer in time, this folder holds what they hold (another
        node's take replaces one another process here stored); without it, the folder's
        first writer wins here, and the shared tiers' take is adopted when it comes — by
        this call if it came while this folder was being written (an adoption then would
        have been overwritten), else by the publisher."""
        publisher = self.publisher
        lead = None if publisher is None or wait <= 0 else publisher.lead(entry, tenant, wait)
        winner, held = entry, None
        try:
            winner, held = self._store_here(entry, None if lead is None else lead.outcome,
                                            tenant, pinned, pin_until)
        finally:
            late = None if publisher is None or lead is None else publisher.release(lead,
                                                                                    winner)
        if late is not None:
            self.adopt(winner, late)
            winner = late
        elif publisher is not None and (lead is None or (
                lead.outcome is None and not same_take(entry, winner))):
            publisher.submit(winner, tenant)  # the take this folder holds is the one to share
        if held is None and not self._durable:  # memory alone: stored once it holds it
            return winner if any(t.contains(entry.header.key, entry.header.kind)
                                 for t in self._private) else None
        return None if held is None else winner

    def _store_here(self, entry: Entry, published: Entry | None, tenant: str, pinned: bool,
                    pin_until: float | None) -> tuple[Entry, Entry | None]:
        """Hold ``published`` (or, not known, ``entry`` unless another process here stored
        a take first) in this folder and this process: (the take held, what a durable tier
        answered)."""
        winner = entry if published is None else published
        held: Entry | None = published
        for tier in self._local_durable:
            got = self.call(tier, "put", partial(
                tier.put, winner, tenant=tenant, pinned=pinned, pin_until=pin_until), None)
            if got is not None and not same_take(got, winner):
                if published is None:
                    winner = got  # another process of this machine published first
                elif self.call(tier, "replace", partial(
                        tier.replace, winner, tenant=tenant), False):
                    got = winner
                    self._adopted(winner)
            held = held or got
        for tier in self._private:
            self.call(tier, "put", partial(tier.replace, winner, tenant=tenant),
                      False)
        return winner, held

    def adopt(self, ours: Entry, winner: Entry) -> None:
        """The shared tiers published another take of ``ours``'s key: hold ``winner`` in
        this folder and this process instead (and tell the other processes here)."""
        for tier in self._local_durable:
            self.call(tier, "adopt", partial(tier.replace, winner), False)
        for tier in self._private:
            self.call(tier, "adopt", partial(tier.replace, winner), False)
        self._adopted(winner)

    def _adopted(self, winner: Entry) -> None:
        with self._lock:
            self.generation += 1
        self._on_adopt(winner)

    def delete(self, key: str, kind: str = "audio") -> bool:
        """Remove ``key`` from every tier; True if any held it."""
        return self._delete_from(self.tiers, key, kind)

    def forget(self, key: str) -> bool:
        """Drop ``key`` (of any kind) from the tiers private to this process: another
        process deleted it from the shared ones and told us."""
        return self._delete_from([t for t in self.tiers if not t.durable], key, None)

    def _delete_from(self, tiers: Sequence[Tier], key: str, kind: str | None) -> bool:
        if self.publisher is not None and any(t not in self._local for t in tiers):
            self.publisher.discard(key)  # a queued write must not bring it back
        with self._lock:
            self.generation += 1
        found = False
        for tier in tiers:
            found = self.call(tier, "delete", partial(tier.delete, key, kind), False) or found
        return found

    # -- the fail-open rule ----------------------------------------------------------
    def guard(self, tier: Tier, purpose: str, max_backoff: float
              ) -> Callable[[str, Callable[[], T], T], T]:
        """Calls on ``tier`` for ``purpose`` under a breaker of their own, whose back-off
        never exceeds ``max_backoff``: the render leases must come back within a second of
        Redis answering again, not when the data breaker's back-off (up to 30 s) ends."""
        name = f"{tier.name} {purpose}"
        self._breakers[name] = _Breaker(max_backoff)

        def guarded(operation: str, fn: Callable[[], T], default: T) -> T:
            return self.call(tier, operation, fn, default, breaker=name)

        return guarded

    def call(self, tier: Tier, operation: str, fn: Callable[[], T], default: T, *,
             breaker: str | None = None) -> T:
        """Run ``fn`` on ``tier`` unless its breaker (the tier's, or the one named) is open;
        any exception is ``default``."""
        state = self._breakers[breaker or tier.name]
        now = self._clock()
        if not state.allows(now):
            return default
        try:
            result = fn()
        except Exception as exc:
            with self._lock:
                state.failed(self._clock(), f"{type(exc).__name__}: {exc}")
            self._faults.report(f"tier {tier.name}", exc,
                                f"tier {tier.name} failed to {operation}; treated as a miss")
            return default
        if state.failures:
            with self._lock:
                state.succeeded()
        return result

    def health(self) -> dict[str, TierHealth]:
        """Each tier's own health, overridden by ``down`` while its breaker is open."""
        now = self._clock()
        report: dict[str, TierHealth] = {}
        for tier in self.tiers:
            breaker = self._breakers[tier.name]
            if not breaker.allows(now):
                report[tier.name] = TierHealth(
                    "down", f"{breaker.failures} failures in a row ({breaker.last_error}); "
                    f"retried in {breaker.open_until - now:.1f} s")
                continue
            health = self.call(tier, "report health", tier.health,
                               TierHealth("down", "health check failed"))
            if (health.state == "ok" and tier not in self._local
                    and self.publisher is not None and self.publisher.shed_recently()):
                health = TierHealth("degraded", "its write queue is full: takes are served, "
                                    "not all are shared")
            report[tier.name] = health
        return report

    def close(self) -> None:
        """Let queued publications finish, then close every tier (a failure to close one
        does not stop the others)."""
        if self.publisher is not None:
            self.publisher.close()
        for tier in self.tiers:
            self.call(tier, "close", tier.close, None)
