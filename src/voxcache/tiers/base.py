"""The tier protocol, and the stack that puts tiers in order and keeps them honest.

A tier stores verified entries by (key, kind): memory, local disk, and (for
several nodes) Redis and an S3-compatible store. Every tier verifies what it
reads back (``entry.decode``) and answers a miss for anything it cannot vouch
for, so the stack never has to.

``TierStack`` is the one place that applies the rules every tier shares:

- **read order and promotion**: the fastest tier first; a hit in a slower tier is
  copied into the faster ones above it (unless a delete happened meanwhile: a
  read that raced a delete must not bring the deleted take back);
- **write-through**: a take goes to every tier; it counts as *stored* once a
  durable tier (one that survives the process) has it;
- **fail open**: a tier that raises is a miss (or a skipped write) for that call,
  never an error for the caller; it is counted, logged once per cause, and after
  ``BREAKER_FAILURES`` failures in a row it is left alone for a back-off period
  that doubles up to ``BREAKER_MAX_SECONDS``; the first call after it is the
  probe, and a success puts the tier back in use without a restart.

The shipped contract suite (``voxcache.testing.tier_contract``) is what every tier
implementation must pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..entry import Entry
from .faults import FaultLog

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
            pin_until: float | None = None) -> bool:
        """Store an entry; True when the tier holds it afterwards."""

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

    def __init__(self) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.backoff = BREAKER_FIRST_SECONDS
        self.last_error = ""

    def allows(self, now: float) -> bool:
        return now >= self.open_until

    def succeeded(self) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.backoff = BREAKER_FIRST_SECONDS

    def failed(self, now: float, error: str) -> None:
        self.failures += 1
        self.last_error = error
        if self.failures >= BREAKER_FAILURES:
            self.open_until = now + self.backoff
            self.backoff = min(self.backoff * 2, BREAKER_MAX_SECONDS)


class TierStack:
    """Tiers in read order (fastest first), with promotion, write-through and fail-open."""

    def __init__(self, tiers: Sequence[Tier], faults: FaultLog,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not tiers:
            raise ValueError("a tier stack needs at least one tier")
        self.tiers = list(tiers)
        self._write_order = sorted(self.tiers, key=lambda tier: not tier.durable)
        """Write-through order: the durable tiers first (they are what survives)."""
        self._durable = any(tier.durable for tier in self.tiers)
        self._faults = faults
        self._clock = clock
        self._breakers = {tier.name: _Breaker() for tier in self.tiers}
        self._lock = threading.Lock()
        self.generation = 0
        """Deletes seen so far: a lower-tier hit read before a delete is not promoted."""

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
            entry = self.call(tier, "get", lambda t=tier: t.get(key, kind), None)
            if entry is not None:
                if depth and generation == self.generation:
                    self.promote(entry, depth)
                return entry, tier.name
        return None

    def promote(self, entry: Entry, depth: int) -> None:
        """Copy an entry found at ``depth`` into every faster tier."""
        for tier in self.tiers[:depth]:
            self.call(tier, "promote", lambda t=tier: t.put(entry), False)

    # -- writes ----------------------------------------------------------------------
    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> bool:
        """Write through every tier, the durable ones first (they are what survives);
        True once a durable tier holds it (the fastest tier, if none is durable)."""
        stored = False
        for tier in self._write_order:
            held = self.call(tier, "put", lambda t=tier: t.put(
                entry, tenant=tenant, pinned=pinned, pin_until=pin_until), False)
            if tier.durable:
                stored = stored or held
        if not self._durable:
            first = self.tiers[0]
            return self.call(first, "contains", lambda: first.contains(
                entry.header.key, entry.header.kind), False)
        return stored

    def delete(self, key: str, kind: str = "audio") -> bool:
        """Remove ``key`` from every tier; True if any held it."""
        return self._delete_from(self.tiers, key, kind)

    def forget(self, key: str) -> bool:
        """Drop ``key`` (of any kind) from the tiers private to this process: another
        process deleted it from the shared ones and told us."""
        return self._delete_from([t for t in self.tiers if not t.durable], key, None)

    def _delete_from(self, tiers: Sequence[Tier], key: str, kind: str | None) -> bool:
        with self._lock:
            self.generation += 1
        found = False
        for tier in tiers:
            found = self.call(tier, "delete", lambda t=tier: t.delete(key, kind), False) or found
        return found

    # -- the fail-open rule ----------------------------------------------------------
    def call(self, tier: Tier, operation: str, fn: Callable[[], T], default: T) -> T:
        """Run ``fn`` on ``tier`` unless its breaker is open; any exception is ``default``."""
        breaker = self._breakers[tier.name]
        now = self._clock()
        if not breaker.allows(now):
            return default
        try:
            result = fn()
        except Exception as exc:
            with self._lock:
                breaker.failed(self._clock(), f"{type(exc).__name__}: {exc}")
            self._faults.report(f"tier {tier.name}", exc,
                                f"tier {tier.name} failed to {operation}; treated as a miss")
            return default
        if breaker.failures:
            with self._lock:
                breaker.succeeded()
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
            report[tier.name] = self.call(tier, "report health", tier.health,
                                          TierHealth("down", "health check failed"))
        return report

    def close(self) -> None:
        """Close every tier (a failure to close one does not stop the others)."""
        for tier in self.tiers:
            self.call(tier, "close", tier.close, None)
